"""The environment a measurement ran in: CPU, GPU and driver, library versions, git commit.

Standard library only (torch is consulted only if the caller already imported it), so the
load-testing client, the spec runner and accuracy evaluation all record the same facts.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["ENVIRONMENT_LIBRARIES", "capture_environment", "cpu_name", "git_commit", "library_versions"]

ENVIRONMENT_LIBRARIES = ("lmmbench", "torch", "transformers", "tokenizers", "accelerate", "av", "numpy", "pillow",
                         "soundfile", "pydantic", "aiohttp", "uvloop", "matplotlib")


def git_commit(start: Path | None = None) -> dict[str, Any]:
    """The commit of the lmmbench checkout (or of ``start``), and whether the tree was dirty."""
    cwd = start or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip() != ""
        return {"commit": sha, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def cpu_name() -> str:
    """The CPU model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> dict[str, Any]:
    if "torch" not in sys.modules:
        return {"available": None}
    import torch

    if not torch.cuda.is_available():
        return {"available": False}
    props = torch.cuda.get_device_properties(0)
    info: dict[str, Any] = {"available": True, "name": props.name, "count": torch.cuda.device_count(),
                            "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        info["driver"] = out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        info["driver"] = None
    return info


def library_versions(names: tuple[str, ...] | list[str]) -> dict[str, str | None]:
    """Installed version of each distribution in ``names`` (None where it is not installed)."""
    versions: dict[str, str | None] = {}
    for lib in names:
        try:
            versions[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[lib] = None
    return versions


def capture_environment() -> dict[str, Any]:
    """CPU, GPU and driver if any, Python and library versions, host, git commit, load average."""
    from datetime import datetime, timezone

    return {
        "time_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": platform.node(),
        "argv": list(sys.argv),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "gpu": _gpu(),
        "libraries": library_versions(ENVIRONMENT_LIBRARIES),
        "git": git_commit(),
        "load_average_1_5_15m": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
