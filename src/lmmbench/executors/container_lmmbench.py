"""Images that carry lmmbench (issue 59): a self-contained image built from a wheel of this checkout, and lmmbench
layered onto an image a row names that lacks it. Nothing of the host is mounted when a row runs from them.

- **The base**: ``localhost/lmmbench-base:bookworm-<hash of its packages>``, a Debian root filesystem made with
  ``debootstrap --variant=minbase --include=python3,libsndfile1`` from the mirror of this machine's apt sources (no
  registry is reachable here), cached as ``rootfs-bookworm-<hash>.tar`` in ``$LMMBENCH_CONTAINER_CACHE`` (default
  ``/var/tmp/lmmbench-containers-<uid>``) and imported once; or any image given as ``base``.
- **The Python**: ``uv venv --python X.Y`` in a container of the base: the base's own ``python3`` when its version is
  X.Y (Debian bookworm's is 3.11), else a standalone build uv downloads (from GitHub, or the mirror
  ``UV_PYTHON_INSTALL_MIRROR`` names); when neither is there the build is refused naming the version. Without a
  version the base's ``python3`` is used.
- **Two layers**: ``localhost/lmmbench-deps:<key>`` holds the venv ``/opt/lmmbench`` with every package of
  ``lmmbench[extras]`` and uv, but not lmmbench (key: the base image, the Python asked for, the extras, the wheel's
  ``Requires-Dist``, the constraints file), and ``localhost/lmmbench:<key>`` adds the wheel (``--no-deps``; key: the
  deps key and the wheel's SHA-256). A source change rebuilds only the thin second layer and removes the one of the
  same checkout's earlier wheel on the same dependencies (unless a container uses it); the others are kept (cached
  by content) until removed with ``podman rmi``.
- **A row's own image** without lmmbench (``python -c 'import lmmbench'`` fails in it) gets a venv with the image's
  packages visible (``--system-site-packages``) and ``lmmbench[extras]`` from the same wheel, committed as
  ``localhost/lmmbench-built:<key>`` (image, wheel, extras, constraints), removed with the plan's built images. An
  image with no ``python`` / ``python3`` on its PATH, or one older than lmmbench's ``Requires-Python``, is refused
  naming what is missing.
- Installs run with the host's pip / uv settings (``container_pip``), the host's uv binary and its cache mounted
  (copied, never linked), on the host network: build time only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lmmbench.core.errors import UserError
from lmmbench.executors.container_wheel import Wheel, find_uv

__all__ = ["BASE_REPO", "BASE_TAG", "IMAGE_REPO", "Probe", "base_image", "build_image", "cache_dir", "layer_lmmbench",
           "probe"]

BASE_REPO, DEPS_REPO, IMAGE_REPO, BUILT_REPO = ("localhost/lmmbench-base", "localhost/lmmbench-deps",
                                                "localhost/lmmbench", "localhost/lmmbench-built")  # fmt: skip
SUITE = "bookworm"
# Debian packages of the base: python3, and the system libraries lmmbench's extras load that their wheels may not
# bundle (libsndfile for soundfile: a local index may offer soundfile's py3-none-any wheel, which loads the system's).
DEBIAN_PACKAGES = ("python3", "libsndfile1")
BASE_TAG = f"{BASE_REPO}:{SUITE}-" + hashlib.sha256(",".join(DEBIAN_PACKAGES).encode()).hexdigest()[:8]
VENV = "/opt/lmmbench"
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_UV, _WHEELS, _UV_CACHE = "/lmmbench/uv", "/lmmbench/wheel", "/lmmbench/uv-cache"
_CONSTRAINTS = "/lmmbench/constraints.txt"
_PY3 = '"$(command -v python3)"'
_NO_PYTHON = 3  # exit code of an install line: the Python asked for is not there


def cache_dir() -> Path:
    """Where the root filesystem and the build locks are kept (not under $HOME: a test session has its own)."""
    named = os.environ.get("LMMBENCH_CONTAINER_CACHE")
    path = Path(named or f"/var/tmp/lmmbench-containers-{os.getuid()}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = f"LMMBENCH_CONTAINER_CACHE={named}" if named else str(path)
        raise UserError(f"{where}: not a folder lmmbench can use for container builds ({exc.strerror}); name a "
                        "writable folder") from None
    return path


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """One build of ``name`` at a time on this machine (parallel test workers, setup's background build)."""
    with (cache_dir() / f"{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    return " | ".join(lines[-3:]) or f"exit code {proc.returncode}"


def _inspect(engine: list[str], image: str, fmt: str) -> str | None:
    proc = subprocess.run([*engine, "image", "inspect", "--format", fmt, image], capture_output=True, text=True,
                          check=False)  # fmt: skip
    return proc.stdout.strip() if proc.returncode == 0 else None


def _mirror() -> str:
    """The Debian mirror of this machine's apt sources (deb822 ``URIs:`` or a one-line ``deb`` entry)."""
    files = [*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")), Path("/etc/apt/sources.list")]
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in line:
                return words[1]
            if words[:1] == ["deb"] and "security" not in line:
                rest = [w for w in words[1:] if not w.startswith("[") and not w.endswith("]")]
                if rest:
                    return rest[0]
    raise UserError("no Debian mirror in /etc/apt/sources.list*: debootstrap needs one (or give --base IMAGE)")


def _rootfs(tar: Path) -> None:
    """``tar``: a Debian root filesystem with python3, made with debootstrap (as root)."""
    import shutil
    import tempfile

    if shutil.which("debootstrap") is None or os.getuid() != 0:
        raise UserError(f"no base image: making {tar.name} needs debootstrap run as root (apt-get install "
                        "debootstrap; bash scripts/container-engine.sh does both), or give --base IMAGE with python3")
    root = Path(tempfile.mkdtemp(prefix="rootfs.", dir=tar.parent))
    log = tar.parent / "debootstrap.log"
    try:
        with log.open("w") as fh:
            include = f"--include={','.join(DEBIAN_PACKAGES)}"
            code = subprocess.call(["debootstrap", "--variant=minbase", include, SUITE, str(root), _mirror()],
                                   stdout=fh, stderr=subprocess.STDOUT)  # fmt: skip
        if code != 0:
            raise UserError(f"debootstrap {SUITE} failed; see {log}")
        subprocess.run(["tar", "-C", str(root), "-cf", f"{tar}.tmp", "."], check=True)
        os.replace(f"{tar}.tmp", tar)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def base_image(engine: list[str]) -> str:
    """The Debian base image (imported from the cached root filesystem, made first when missing)."""
    tag = BASE_TAG
    with _locked("base"):
        if _inspect(engine, tag, "{{.Id}}") is None:
            tar = cache_dir() / f"rootfs-{tag.rsplit(':', 1)[1]}.tar"
            if not tar.is_file() or tar.stat().st_size == 0:
                _rootfs(tar)
            proc = subprocess.run([*engine, "import", "--change", f"ENV PATH={_PATH}", str(tar), tag],
                                  capture_output=True, text=True, check=False)  # fmt: skip
            if proc.returncode != 0:
                raise UserError(f"importing the base image {tag} failed: {_tail(proc)}")
    return tag


@dataclass(frozen=True)
class Probe:
    """What an image holds: the version of its ``python`` (None: no python on its PATH) and of its lmmbench."""

    python: str | None
    lmmbench: str | None


_PROBE = ("P=$(command -v python || command -v python3) || { echo none; exit 0; }; \"$P\" -c 'import sys, "
          "platform\ntry:\n    from importlib.metadata import version; v = version(\"lmmbench\")\n"
          "except Exception:\n    v = \"none\"\nprint(platform.python_version(), v)'")  # fmt: skip


def probe(engine: list[str], image: str) -> Probe:
    """Run ``image`` once to see its Python and lmmbench (``UserError`` when it cannot run)."""
    argv = [*engine, "run", "--rm", "--network", "none", "--label", "lmmbench.probe=1", "--entrypoint", "", image,
            "sh", "-c", _PROBE]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    words = proc.stdout.split()
    if proc.returncode != 0 or not words:
        raise UserError(f"container executor: image {image} cannot run `sh -c` to look for python and lmmbench: "
                        f"{_tail(proc)}")  # fmt: skip
    if words[0] == "none":
        return Probe(None, None)
    return Probe(words[0], None if len(words) < 2 or words[1] == "none" else words[1])


def _install_args(wheel: Wheel, constraints: Path) -> tuple[list[str], str]:
    """The engine's ``-v`` arguments of an install and the shell line that sets its environment: the host's pip /
    uv settings, its uv and uv cache, the wheel's folder and the constraints file, read-only but for the cache. The
    variables are exported by the line, not given with ``-e``: a commit keeps a container's ``-e`` in the image."""
    from lmmbench.executors.container_pip import install_settings

    env, mounts = install_settings()
    cache = subprocess.run([find_uv(), "cache", "dir"], capture_output=True, text=True, check=False).stdout.strip()
    env.update({"UV_LINK_MODE": "copy", "UV_PYTHON_INSTALL_DIR": "/opt/lmmbench-python"})
    mounts += [f"{find_uv()}:{_UV}:ro", f"{wheel.path.parent.resolve()}:{_WHEELS}:ro",
               f"{constraints.resolve()}:{_CONSTRAINTS}:ro"]
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
        mounts.append(f"{cache}:{_UV_CACHE}")
        env["UV_CACHE_DIR"] = _UV_CACHE
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(env.items()))
    return [a for m in mounts for a in ("-v", m)], exports


def _run_commit(engine: list[str], image: str, line: str, args: tuple[list[str], str], tag: str,
                changes: list[str]) -> None:  # fmt: skip
    """Run ``line`` in a container of ``image`` (with the install's mounts and environment, ``args``) and commit it
    as ``tag``; ``UserError`` with the last lines."""
    box = "lmmbench-build-" + hashlib.sha256(tag.encode()).hexdigest()[:12]
    subprocess.run([*engine, "rm", "-f", box], capture_output=True, check=False)
    try:
        proc = subprocess.run([*engine, "run", "--name", box, "--network", "host", "--entrypoint", "", *args[0], image,
                               "sh", "-c", args[1] + line], capture_output=True, text=True, check=False)  # fmt: skip
        if proc.returncode == _NO_PYTHON:
            raise UserError(f"no Python for the image: {_tail(proc)}")
        if proc.returncode == 0:
            flags = [a for c in changes for a in ("--change", c)]
            proc = subprocess.run([*engine, "commit", *flags, box, tag], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise UserError(f"building {tag} from {image} failed: {_tail(proc)}")
    finally:
        subprocess.run([*engine, "rm", "-f", box], capture_output=True, check=False)


def _venv_line(python: str | None, interpreter: str, system_site: bool) -> str:
    ask = shlex.quote(python) if python else interpreter
    why = (f"Python {python}: the image has $(python3 -V 2>&1 || echo no python3) and uv could not download "
           f"{python}" if python else "the image has no python3")  # fmt: skip
    site = " --system-site-packages" if system_site else ""
    return (f"{_UV} venv -q --seed{site} --python {ask} {VENV} || {{ echo \"{why}; use --python with the image's "
            f"version or another --base\" >&2; exit {_NO_PYTHON}; }}")  # fmt: skip


def _image_path(engine: list[str], image: str) -> str:
    env = _inspect(engine, image, "{{range .Config.Env}}{{println .}}{{end}}") or ""
    path = next((e[5:] for e in env.splitlines() if e.startswith("PATH=")), _PATH)
    return f"{VENV}/bin:{path}"


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def build_image(engine: list[str], wheel: Wheel, extras: list[str], constraints: Path, python: str | None = None,
                base: str | None = None) -> str:  # fmt: skip
    """The self-contained image of ``wheel`` with ``extras`` (reduced already) on ``base`` (default: the Debian
    base), built when missing; its tag."""
    base = base or base_image(engine)
    base_id = _inspect(engine, base, "{{.Id}}")
    if base_id is None:
        raise UserError(f"the base image {base} is not here (podman images lists the local ones)")
    spec = f"lmmbench[{','.join(extras)}]" if extras else "lmmbench"
    ctext = constraints.read_text(encoding="utf-8", errors="replace")
    whl = f"{_WHEELS}/{wheel.path.name}"
    deps_line = (f"set -e; {_venv_line(python, _PY3, False)}; {_UV} pip install -q --python {VENV}/bin/python "
                 f"-c {_CONSTRAINTS} {shlex.quote(whl + spec[8:])} uv; "
                 f"{_UV} pip uninstall -q --python {VENV}/bin/python lmmbench")  # fmt: skip
    line = f"{_UV} pip install -q --no-deps --python {VENV}/bin/python {shlex.quote(whl)}"
    deps_key = _key(base_id, python or "", spec, *wheel.requires, ctext, deps_line)  # the recipe too
    deps, final = f"{DEPS_REPO}:{deps_key}", f"{IMAGE_REPO}:{_key(deps_key, wheel.sha256, line)}"
    labels = ["LABEL lmmbench.image=1", f"LABEL lmmbench.extras={','.join(extras) or '-'}",
              f"LABEL lmmbench.python={python or 'base'}"]  # fmt: skip
    with _locked(f"image-{deps_key}"):
        if _inspect(engine, deps, "{{.Id}}") is None:
            _run_commit(engine, base, deps_line, _install_args(wheel, constraints), deps,
                        [f"ENV PATH={_image_path(engine, base)}", *labels])  # fmt: skip
        if _inspect(engine, final, "{{.Id}}") is None:
            origin = hashlib.sha256(wheel.source.encode()).hexdigest()[:16]
            versions = [f"LABEL lmmbench.wheel={wheel.sha256}", f"LABEL lmmbench.version={wheel.version}",
                        f"LABEL lmmbench.deps={deps_key}", f"LABEL lmmbench.source={origin}"]  # fmt: skip
            _run_commit(engine, deps, line, _install_args(wheel, constraints), final, versions)
            _drop_older(engine, f"{deps_key},{origin}", final)
    return final


def _drop_older(engine: list[str], keys: str, final: str) -> None:
    """Remove the images of earlier wheels of the same checkout on the same dependencies (``keys``: the deps key and
    the checkout's hash; a source change each); another checkout's are left alone, and an image a container still
    uses is kept (``rmi`` without ``-f`` refuses it)."""
    deps_key, origin = keys.split(",")
    # one label filter: podman ORs several
    proc = subprocess.run([*engine, "images", "--filter", f"label=lmmbench.deps={deps_key}", "--format",
                           '{{.Repository}}:{{.Tag}} {{index .Labels "lmmbench.source"}}'], capture_output=True,
                          text=True, check=False)  # fmt: skip
    for line in proc.stdout.splitlines():
        tag, _, source = line.partition(" ")
        if tag != final and tag.startswith(f"{IMAGE_REPO}:") and source.strip() == origin:
            subprocess.run([*engine, "rmi", tag], capture_output=True, check=False)


def layer_lmmbench(engine: list[str], image: str, found: Probe, wheel: Wheel, extras: list[str],
                   constraints: Path) -> str:  # fmt: skip
    """``image`` when it holds lmmbench; else the tag of ``image`` with lmmbench from ``wheel`` layered on (built
    when missing, labelled ``lmmbench.built=1``); ``UserError`` naming what the image lacks."""
    if found.lmmbench is not None:
        return image
    if found.python is None:
        raise UserError(f"container executor: image {image} has no python or python3 on its PATH, so lmmbench "
                        "cannot be installed in it; use an image with Python >= 3.10, or name no image (the "
                        "self-contained one)")  # fmt: skip
    major_minor = tuple(int(p) for p in found.python.split(".")[:2])
    if major_minor < (3, 10):
        raise UserError(f"container executor: image {image} has Python {found.python}; lmmbench needs >= 3.10")
    image_id = _inspect(engine, image, "{{.Id}}") or image
    spec = f"lmmbench[{','.join(extras)}]" if extras else "lmmbench"
    whl = f"{_WHEELS}/{wheel.path.name}"
    py = '"$(command -v python || command -v python3)"'
    line = (f"set -e; {_venv_line(None, py, True)}; {_UV} pip install -q --python {VENV}/bin/python "
            f"-c {_CONSTRAINTS} {shlex.quote(whl + spec[8:])} uv")  # fmt: skip
    tag = f"{BUILT_REPO}:{_key(image_id, wheel.sha256, spec, constraints.read_text(encoding='utf-8'), line)}"
    with _locked(f"layer-{tag.rsplit(':', 1)[1]}"):
        if _inspect(engine, tag, "{{.Id}}") is None:
            _run_commit(engine, image, line, _install_args(wheel, constraints), tag,
                        [f"ENV PATH={_image_path(engine, image)}", "LABEL lmmbench.built=1",
                         f"LABEL lmmbench.wheel={wheel.sha256}"])  # fmt: skip
    return tag
