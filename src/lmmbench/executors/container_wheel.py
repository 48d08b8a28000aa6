"""lmmbench as a wheel for container images (issue 59): built from the checkout this lmmbench is imported from, and
the extras a set of rows needs.

- The wheel is built with ``uv build --wheel`` (hatchling builds reproducibly: the same sources give the same bytes,
  so its SHA-256 names the image built from it) into ``$LMMBENCH_HOME/images/wheels/<sha>/``.
- ``$LMMBENCH_WHEEL`` names a wheel to use instead (lmmbench installed from a package, no checkout here).
- The extras of a row kind: ``eval`` rows ``eval``, ``run`` rows ``models``, ``perf`` rows ``plots``, ``command``
  rows none. A set of extras is reduced to the smallest one that installs the same packages (``eval`` holds
  ``models``, which holds ``plots``: read from the wheel's ``Requires-Dist``), so that rows that need the same
  packages share one image.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lmmbench.core.errors import UserError

__all__ = ["KIND_EXTRAS", "Wheel", "find_uv", "lmmbench_wheel", "reduce_extras"]

KIND_EXTRAS: dict[str, tuple[str, ...]] = {"eval": ("eval",), "run": ("models",), "perf": ("plots",), "command": ()}
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


@dataclass(frozen=True)
class Wheel:
    """A built lmmbench wheel: its file, SHA-256, version, ``Requires-Dist`` lines and where it came from (the
    checkout, or the wheel ``$LMMBENCH_WHEEL`` names)."""

    path: Path
    sha256: str
    version: str
    requires: tuple[str, ...]
    source: str = ""

    def extra_requirements(self, extra: str) -> set[str]:
        """The requirements ``extra`` adds, with the extras it names (``lmmbench[models]``) expanded."""
        out: set[str] = set()
        todo, seen = [extra], set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for line in self.requires:
                marker = _EXTRA.search(line)
                if marker is None or marker.group(1) != name:
                    continue
                req = line.split(";")[0].strip()
                inner = re.fullmatch(r"lmmbench\s*\[([^\]]+)\]", req)
                if inner:
                    todo += [e.strip() for e in inner.group(1).split(",")]
                else:
                    out.add(req)
        return out

    def extras(self) -> set[str]:
        """Every extra the wheel declares."""
        return {m.group(1) for line in self.requires if (m := _EXTRA.search(line))}


def reduce_extras(wheel: Wheel, extras: list[str] | set[str] | tuple[str, ...]) -> list[str]:
    """``extras`` checked against the wheel's, without those whose packages the others install already (sorted)."""
    unknown = sorted(set(extras) - wheel.extras())
    if unknown:
        raise UserError(f"extras {', '.join(unknown)}: lmmbench {wheel.version} has no such extra (it has "
                        f"{', '.join(sorted(wheel.extras()))})")  # fmt: skip
    keep = sorted(set(extras))
    for extra in list(keep):
        others = set().union(*(wheel.extra_requirements(e) for e in keep if e != extra))
        if wheel.extra_requirements(extra) <= others:
            keep.remove(extra)
    return keep


def find_uv() -> str:
    """The uv binary beside this Python (a venv's), else the one of the importable ``uv`` package (a venv that sees
    another's packages: the docs test's), else on PATH; ``UserError`` when there is none."""
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or _uv_package_binary() or shutil.which("uv")
    if found is None:
        raise UserError("building an image needs uv (pip install uv): it builds the wheel and installs it")
    return str(Path(found).resolve())


def _uv_package_binary() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    try:
        return str(find_uv_bin())
    except FileNotFoundError:
        return None


def _checkout() -> Path:
    import lmmbench

    root = Path(lmmbench.__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or 'name = "lmmbench"' not in pyproject.read_text(encoding="utf-8"):
        raise UserError(f"lmmbench is not imported from a checkout ({root} has no lmmbench pyproject.toml): set "
                        "LMMBENCH_WHEEL to a lmmbench wheel to install in images")  # fmt: skip
    return root


def _read(path: Path) -> Wheel:
    try:
        with zipfile.ZipFile(path) as zf:
            meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            meta = zf.read(meta_name).decode("utf-8")
    except (OSError, zipfile.BadZipFile, StopIteration) as exc:
        raise UserError(f"{path}: not a wheel with METADATA ({exc or 'no METADATA'})") from None
    fields = [line.split(":", 1) for line in meta.split("\n\n")[0].splitlines() if ":" in line]
    if not any(k == "Name" and v.strip() == "lmmbench" for k, v in fields):
        raise UserError(f"{path}: not a lmmbench wheel")
    version = next(v.strip() for k, v in fields if k == "Version")
    requires = tuple(v.strip() for k, v in fields if k == "Requires-Dist")
    return Wheel(path, hashlib.sha256(path.read_bytes()).hexdigest(), version, requires)


def lmmbench_wheel() -> Wheel:
    """The lmmbench wheel images install: ``$LMMBENCH_WHEEL``, else one built from this checkout (cached by its
    SHA-256 under ``$LMMBENCH_HOME/images/wheels``)."""
    given = os.environ.get("LMMBENCH_WHEEL")
    if given:
        if not Path(given).is_file():
            raise UserError(f"LMMBENCH_WHEEL={given}: no such file")
        wheel = _read(Path(given).absolute())
        return Wheel(wheel.path, wheel.sha256, wheel.version, wheel.requires, str(wheel.path))
    from lmmbench.models.tiny import lmmbench_home

    root, uv = _checkout(), find_uv()
    store = lmmbench_home() / "images" / "wheels"
    store.mkdir(parents=True, exist_ok=True)
    from lmmbench.executors.container_pip import install_settings

    env = {**os.environ, **install_settings()[0]}  # pip's index / find-links reach uv too (the build backend)
    with tempfile.TemporaryDirectory(dir=store) as tmp:
        proc = subprocess.run([uv, "build", "--wheel", "-q", "-o", tmp, str(root)], capture_output=True, text=True,
                              env=env, check=False)  # fmt: skip
        built = sorted(Path(tmp).glob("lmmbench-*.whl"))
        if proc.returncode != 0 or not built:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise UserError(f"building lmmbench's wheel from {root} failed: {tail or proc.returncode}")
        wheel = _read(built[0])
        final = store / wheel.sha256[:16] / built[0].name
        if not final.is_file():
            final.parent.mkdir(exist_ok=True)
            os.replace(built[0], final)
    return Wheel(final, wheel.sha256, wheel.version, wheel.requires, str(root))
