"""Venvs of peer projects that cannot share lmmbench's (other pins), built with uv once and kept across test runs,
keyed by what was asked for: ``$LMMBENCH_TEST_VENVS`` (default ``~/.cache/lmmbench/test-venvs``)``/<name>-<key>``,
where the key hashes the Python version, the requirement lines and uv's arguments. Built into ``<dir>.part`` under
an exclusive lock on ``<dir>.lock`` (two pytest workers build it once) and renamed when done: a venv whose build
failed or was interrupted is never taken for a finished one. ``build.json`` in it records seconds and bytes.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def venvs_root() -> Path:
    """Where the cached venvs live."""
    default = Path.home() / ".cache" / "lmmbench" / "test-venvs"
    return Path(os.environ.get("LMMBENCH_TEST_VENVS") or default)


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"  # scripts/setup.sh installs uv into lmmbench's venv
    found = str(here) if here.exists() else shutil.which("uv")
    if not found:
        raise RuntimeError("uv is not installed (scripts/setup.sh puts it in .venv)")
    return found


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def cached_venv(name: str, requirements: list[str], uv_args: tuple[str, ...] = (), timeout_s: float = 1200) -> Path:
    """The venv of ``name`` holding ``requirements``, built now if no finished one has this key; its root. Run its
    ``bin/python`` only: the console scripts' first lines name the ``.part`` folder it was built in."""
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = hashlib.sha256(json.dumps([py, sorted(requirements), list(uv_args)]).encode()).hexdigest()[:16]
    root = venvs_root()
    root.mkdir(parents=True, exist_ok=True)
    where = root / f"{name}-{key}"
    with (root / f"{name}-{key}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (where / "build.json").exists():
            return where
        part = where.with_name(where.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        t0 = time.perf_counter_ns()
        uv = _uv()
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(part)], check=True, timeout=120,
                       capture_output=True)
        done = subprocess.run([uv, "pip", "install", "-q", "--python", str(part / "bin" / "python"), *uv_args,
                               *requirements], capture_output=True, text=True, timeout=timeout_s)
        if done.returncode:
            shutil.rmtree(part, ignore_errors=True)
            raise RuntimeError(f"uv could not build the {name} venv: {done.stderr.strip()[-600:]}")
        seconds = (time.perf_counter_ns() - t0) / 1e9
        (part / "build.json").write_text(json.dumps({"requirements": requirements, "uv_args": list(uv_args),
                                                     "build_s": round(seconds, 1), "bytes": _size(part)}))
        part.rename(where)
        return where
