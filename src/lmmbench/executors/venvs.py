"""The ``venv`` executor: each row runs in a virtual environment with its requirements, installed
just in time and cached by a hash of (requirements, Python version, constraints).

Environments live in ``$LMMBENCH_HOME/venvs/<hash>/``. They are created with ``uv`` when it is on
PATH, else ``python -m venv --without-pip`` and the driver's pip (``pip --python <venv>``; a venv's own
pip costs seconds to install), always with ``--system-site-packages`` and always installing with
the project's constraints file (``-c constraints.txt``: otherwise a requirement that pulls torch gets
a multi-GB CUDA build). lmmbench itself is put into the venv as a ``.pth`` file naming the source the
driver runs (a no-deps editable install: the worker runs exactly the driver's lmmbench), and a
second ``.pth`` adds the driver's site-packages after the venv's own, so lmmbench's dependencies
(torch included) come from the driver's environment and the venv's requirements win over them. So a venv costs
only its own requirements. The second row (or plan) with the same requirements reuses it.

That is the ``shared`` mode. The ``isolated`` mode (the default of a row that declares ``requirements`` or
a ``python``; ``isolation:`` on a row or the plan picks either) holds nothing of the driver's
environment: no system site-packages, no driver path. lmmbench is installed into it from the source
tree the driver runs (``uv pip install -e <tree>``, with the constraints file, as scripts/setup.sh
does; a driver installed from a wheel gets its package copied and its core requirements installed), so
it has lmmbench's base package (the load-testing client) plus the row's requirements; a requirement
``lmmbench[EXTRA,...]`` installs those extras of that same tree (``lmmbench[models]`` for in-process
models).

What is kept is bounded (``executors.venv_cache``): a row holds its venv while it runs (nothing removes a venv in
use), and after a venv is built or taken the least recently used ones beyond the limits ``venvs_kept`` and
``venvs_bytes`` are removed; ``lmmbench envs list|prune`` shows and prunes them by hand.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lmmbench.core.errors import UserError
from lmmbench.executors.base import EXECUTORS, DoneCallback, ExecutorSettings
from lmmbench.executors.jobs import Job, RowResult
from lmmbench.executors.local import worker_argv
from lmmbench.executors.pool import Slot, WorkerPool
from lmmbench.executors.venv_cache import MARKER, VenvLease, lock_file, prune_venvs, take_lease, venv_usage

__all__ = ["PreparedVenv", "VenvExecutor", "default_constraints", "enforce_bound", "ensure_venv", "isolation_of",
           "venv_key"]

MIN_PYTHON = (3, 10)  # pyproject's requires-python
_LOCK = threading.Lock()


@dataclass(frozen=True)
class PreparedVenv:
    """A ready venv: its interpreter, whether this call created it, how long that took, and the row's hold on it
    (released when the row ends; nothing removes the venv before)."""

    python: Path
    created: bool
    setup_s: float
    isolation: str = "shared"
    lease: VenvLease | None = field(default=None, compare=False, repr=False)


def default_constraints() -> Path:
    """The project's constraints file: ``$LMMBENCH_CONSTRAINTS``, else constraints.txt of the source tree."""
    import os

    env = os.environ.get("LMMBENCH_CONSTRAINTS")
    if env:
        if not Path(env).is_file():
            raise UserError(f"LMMBENCH_CONSTRAINTS={env}: no such file; point it at lmmbench's constraints.txt")
        return Path(env)
    import lmmbench

    path = Path(lmmbench.__file__).resolve().parents[2] / "constraints.txt"
    if not path.is_file():
        raise UserError("the venv executor installs with a constraints file: set LMMBENCH_CONSTRAINTS=<path to "
                        "lmmbench's constraints.txt>")
    return path


def _python_version(python: str | None) -> str:
    return python or f"{sys.version_info.major}.{sys.version_info.minor}"


def isolation_of(job: Job) -> str:
    """A row's venv mode: its own ``isolation``, else isolated when it declares requirements or a python."""
    return job.isolation or ("isolated" if job.requirements or job.python else "shared")


def venv_key(requirements: list[str], python: str | None, constraints: Path, isolation: str = "shared") -> str:
    """The cache key of an environment: a hash of its requirements, Python version, constraints and mode."""
    data = {"requirements": sorted(requirements), "python": _python_version(python),
            "constraints": constraints.read_text(encoding="utf-8")}  # fmt: skip
    if isolation != "shared":  # the shared venvs keep the keys they had before the isolated mode existed
        data["isolation"] = isolation
    payload = json.dumps(data, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _too_old(version: str) -> bool:
    try:
        return tuple(int(p) for p in version.split(".")[:2]) < MIN_PYTHON
    except ValueError:
        return False


def _runs_as(exe: str, version: str) -> bool:
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def _base_python(python: str | None) -> str:
    """An interpreter of version ``python`` that really runs: on PATH, or installed by pyenv (whose shims on
    PATH refuse a version that is not activated), or in the usual system folders."""
    if python is None or python == _python_version(None):
        return sys.executable
    import glob
    import os

    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which(f"python{python}"), *sorted(glob.glob(f"{pyenv}/versions/{python}*/bin/python{python}")),
                  f"/usr/bin/python{python}", f"/usr/local/bin/python{python}"]  # fmt: skip
    for exe in candidates:
        if exe and Path(exe).is_file() and _runs_as(exe, python):
            if _too_old(python):
                raise UserError(f"python: {exe} is Python {python}; lmmbench needs Python "
                                f"{'.'.join(map(str, MIN_PYTHON))} or newer to run a row")
            return exe
    raise UserError(f"python: no interpreter python{python} found on PATH or under pyenv for the venv "
                    "(install it, or use uv)")


def _run(argv: list[str], log: Path) -> None:
    with log.open("ab") as fh:
        fh.write(("$ " + " ".join(argv) + "\n").encode())
        fh.flush()
        code = subprocess.call(argv, stdout=fh, stderr=subprocess.STDOUT)
    if code != 0:
        tail = " | ".join(log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:])
        raise UserError(f"venv setup failed ({argv[0]} exit {code}); log {log}: {tail}")


def _uv() -> str | None:
    """``uv`` on PATH, else the one installed beside the driver's interpreter (scripts/setup.sh puts it there)."""
    beside = Path(sys.executable).parent / "uv"
    return shutil.which("uv") or (str(beside) if beside.is_file() else None)


def _create(target: Path, requirements: list[str], python: str | None, constraints: Path, log: Path,
            isolation: str = "shared") -> None:  # fmt: skip
    import importlib.util

    uv = _uv()
    driver_pip = importlib.util.find_spec("pip") is not None  # then the venv needs no pip of its own
    system = ["--system-site-packages"] if isolation == "shared" else []
    if uv:
        _run([uv, "venv", "--python", _base_python(python), *system, str(target)], log)
    else:
        _run([_base_python(python), "-m", "venv", *system, *(["--without-pip"] * driver_pip), str(target)], log)
    py = target / "bin" / "python"
    site = subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()  # fmt: skip
    if isolation == "isolated":
        requirements = _lmmbench_install(Path(site), requirements)
    elif _python_version(python) == _python_version(None):
        _link_driver(Path(site))
    else:  # another Python: none of the driver's packages (built for its version) may leak in
        requirements = [*_copy_lmmbench(Path(site)), *requirements]
    if not requirements:
        return
    links = [a for d in _find_links() for a in ("--find-links", d)]
    if uv:
        _run([uv, "pip", "install", "--python", str(py), "-c", str(constraints), *links, *requirements], log)
    else:
        pip = [sys.executable, "-m", "pip", "--python", str(py)] if driver_pip else [str(py), "-m", "pip"]
        _run([*pip, "install", "-q", "--disable-pip-version-check", "-c", str(constraints), *requirements], log)


def _source_tree() -> Path | None:
    """The source tree the driver's lmmbench runs from (``<tree>/src/lmmbench``), if it runs from one."""
    import lmmbench

    tree = Path(lmmbench.__file__).resolve().parents[2]
    return tree if (tree / "pyproject.toml").is_file() and (tree / "src" / "lmmbench").is_dir() else None


def _lmmbench_install(site: Path, requirements: list[str]) -> list[str]:
    """What an isolated venv installs: lmmbench from the driver's source tree (editable, so the worker runs the
    driver's code; ``lmmbench[extras]`` requirements become that tree's extras), then the row's requirements.
    A driver not run from a source tree: its package copied, its core requirements installed."""
    tree = _source_tree()
    extras = sorted({e.strip() for r in requirements if r.replace(" ", "").startswith("lmmbench[")
                     for e in r.split("[", 1)[1].split("]", 1)[0].split(",") if e.strip()})  # fmt: skip
    rest = [r for r in requirements if not r.replace(" ", "").startswith("lmmbench[")]
    if tree is None:
        return [*_copy_lmmbench(site), *requirements]
    return ["-e", f"{tree}[{','.join(extras)}]" if extras else str(tree), *rest]


def _find_links() -> list[str]:
    """pip's find-links folders (``PIP_FIND_LINKS``), which uv does not read (where a CPU torch wheel may lie)."""
    import os

    return [d for d in os.environ.get("PIP_FIND_LINKS", "").split() if Path(d).is_dir()]


def _copy_lmmbench(site: Path) -> list[str]:
    """lmmbench's own package copied into a venv of another Python version; returns its core requirements
    (no extras: a row there runs what needs no torch, such as perf), to be installed for that version."""
    from importlib import metadata

    import lmmbench

    shutil.copytree(Path(lmmbench.__file__).resolve().parent, site / "lmmbench",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    try:
        reqs = metadata.requires("lmmbench") or []
    except metadata.PackageNotFoundError:  # running from a source tree that was never installed
        reqs = ["pydantic>=2.6", "pyyaml>=6", "typer>=0.12", "rich>=13", "tokenizers>=0.19"]
    return [r.split(";")[0].strip() for r in reqs if "extra ==" not in r]


def _link_driver(site: Path) -> None:
    """lmmbench and the driver's site-packages into the venv, after its own packages."""
    import lmmbench

    (site / "lmmbench-source.pth").write_text(str(Path(lmmbench.__file__).resolve().parents[1]) + "\n")
    # when the driver runs in a venv itself, --system-site-packages only reaches the interpreter
    # below it, not the driver's packages
    driver_sites = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "lmmbench-driver-site.pth").write_text("".join(f"{p}\n" for p in driver_sites))


def ensure_venv(requirements: list[str], python: str | None, constraints: Path, home: Path,
                isolation: str = "shared", bound: bool = True) -> PreparedVenv:  # fmt: skip
    """The venv for ``requirements`` under ``home/venvs``: reused when built before, else built now; held for the
    caller (``PreparedVenv.lease``); then, after a build (or always with ``bound``), the least recently used venvs
    beyond the bounds are removed."""
    t0 = time.perf_counter_ns()
    root = home / "venvs" / venv_key(requirements, python, constraints, isolation)
    root.parent.mkdir(parents=True, exist_ok=True)
    with _LOCK:
        # two plans building one venv: the second waits, then reuses (a prune holds it while removing it)
        lock = lock_file(root.parent / f"{root.name}.lock", exclusive=True, wait=True)
        assert lock is not None
        with lock:
            created = not (root / MARKER).is_file()
            built_s = _build(root, requirements, python, constraints, isolation, t0) if created else None
            lease = take_lease(root)
    setup_s = built_s if built_s is not None else (time.perf_counter_ns() - t0) / 1e9
    if created or bound:
        enforce_bound(home)
    return PreparedVenv(root / "bin" / "python", created, setup_s, isolation, lease)


def _build(root: Path, requirements: list[str], python: str | None, constraints: Path, isolation: str,
           t0: int) -> float:  # fmt: skip
    """Build the venv at ``root`` (the caller holds its lock); returns the seconds since ``t0``."""
    shutil.rmtree(root, ignore_errors=True)  # a half-built one from a crash
    log = root.parent / f"{root.name}.log"
    log.unlink(missing_ok=True)
    _create(root, requirements, python, constraints, log, isolation)
    setup_s = (time.perf_counter_ns() - t0) / 1e9
    size_bytes, _ = venv_usage(root.parent, root.name)  # what the automatic bound counts (docs/plans.md)
    (root / MARKER).write_text(json.dumps({"requirements": requirements, "python": _python_version(python),
                                           "constraints": str(constraints), "isolation": isolation,
                                           "setup_s": setup_s, "size_bytes": size_bytes}, indent=2))  # fmt: skip
    return setup_s


def enforce_bound(home: Path) -> None:
    """The least recently used venvs beyond ``venvs_kept`` / ``venvs_bytes`` removed (those in use stay), each
    counted at the size recorded when it was built; a failed build is ranked as the others are (its log, which
    the row's error names, stays while it is recent)."""
    result = prune_venvs(home, measure=False, keep_unfinished=True)
    if result.removed:
        print(f"note: removed {len(result.removed)} least recently used venv(s) beyond venvs_kept={result.keep} / "
              f"venvs_bytes={result.max_bytes} ({', '.join(e.key for e in result.removed)}; "
              f"{result.freed_bytes} bytes freed)", file=sys.stderr)


def _failed(job: Job, error: str) -> RowResult:
    return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                     error=error)


class VenvExecutor:
    """Prepares each distinct environment once, then runs rows in them through the worker pool."""

    staged = True  # its pool takes every row at once; each starts when the plan's schedule says its needs ended

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self.venvs: dict[str, PreparedVenv] = {}

    def _launch(self, job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
        venv = self.venvs[job.name]
        # isolated: neither the driver's PYTHONPATH nor the user's site-packages reach the row
        env = {"PYTHONPATH": "", "PYTHONNOUSERSITE": "1"} if venv.isolation == "isolated" else {}
        return worker_argv(str(venv.python), job_path), env

    def prepare(self, jobs: list[Job], done: DoneCallback) -> list[Job]:
        """Before any row of the plan runs: find each row's interpreter and build (or reuse) its venv, which
        resolves and installs its requirements; a row that cannot have one fails here, alone, with the cause
        and the install log's tail. Returns the rows that can run."""
        from lmmbench.models.tiny import lmmbench_home

        try:
            constraints = self.settings.constraints or default_constraints()
        except UserError as exc:
            for job in jobs:
                done(_failed(job, str(exc)))
            return []
        ready: list[Job] = []
        for job in jobs:
            try:
                self.venvs[job.name] = ensure_venv(job.requirements, job.python, constraints, lmmbench_home(),
                                                   isolation_of(job), bound=False)  # fmt: skip
                ready.append(job)
            except UserError as exc:
                done(_failed(job, str(exc)))
        if ready:  # the bound once for the rows' venvs reused (each build applied it already)
            enforce_bound(lmmbench_home())
        return ready

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Run the rows in their venvs through the pool (``prepare`` first when it was not called); each venv is
        held from ``prepare`` until its rows end."""
        ready = [j for j in jobs if j.name in self.venvs]
        ready += self.prepare([j for j in jobs if j.name not in self.venvs], done)

        def with_venv(result: RowResult) -> None:
            v = self.venvs[result.name]
            done(result.model_copy(update={"metrics": {**result.metrics, "venv_created": v.created,
                                                       "venv_setup_s": v.setup_s,
                                                       "venv_isolation": v.isolation}}))  # fmt: skip

        try:
            WorkerPool(self.settings, self._launch).run(ready, with_venv)
        finally:  # the rows ended: their venvs may be pruned from now on (the last use recorded)
            for job in jobs:
                venv = self.venvs.get(job.name)
                if venv is not None and venv.lease is not None:
                    venv.lease.release()


EXECUTORS.add("venv", VenvExecutor)
