"""Whether the data sets of lm-eval catalogue tasks are in the cache, checked before lm-eval builds its tasks.

Offline (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``), ``datasets`` can read a hub data set only from its caches;
lm-eval finds a missing one after it has indexed and built the whole task list (seconds). lmmbench reads each
named task's ``dataset_path`` (following ``include:``) from its YAML file and refuses, in one line, a hub data set
that neither the ``datasets`` Arrow cache (``ORG___NAME``) nor the hub cache (``datasets--ORG--NAME``) holds.
Groups and tags are left to lm-eval; online, ``datasets`` downloads what is missing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["check_catalogue_data"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))  # fmt: skip


def _yaml(path: Path) -> dict[str, Any]:
    """A task file read with lm-eval's tags (``!function``) left as text."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _dataset_path(path: Path, depth: int = 0) -> str | None:
    data = _yaml(path)
    found = data.get("dataset_path")
    if isinstance(found, str):
        return found
    include = data.get("include")
    if isinstance(include, str) and depth < 20:
        return _dataset_path(path.parent / include, depth + 1)
    return None


def _cached(repo: str) -> bool:
    hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    arrow = Path(os.environ.get("HF_DATASETS_CACHE") or hf_home / "datasets")
    hub = Path(os.environ.get("HF_HUB_CACHE") or hf_home / "hub")
    return (arrow / repo.replace("/", "___")).is_dir() or (hub / f"datasets--{repo.replace('/', '--')}").is_dir()


def check_catalogue_data(names: list[str], include_path: list[Path]) -> None:
    """Refuse, offline, a catalogue task whose hub data set is in no local cache (one line naming both)."""
    if not _offline():
        return
    from lmmbench.evaluation.lmeval.index import catalogue_index

    index = catalogue_index(include_path)
    if index is None:
        return
    files = index[1]
    for name in names:
        if name not in files:
            continue  # a group or a tag: lm-eval expands it
        repo = _dataset_path(Path(files[name]))
        if repo is None or not _HUB_ID.match(repo) or Path(repo).expanduser().exists():
            continue  # a local folder, a file, or a builder lm-eval resolves itself
        if not _cached(repo):
            raise UserError(f"--tasks {name}: its data set {repo} is not in the datasets cache and the hub is "
                            "offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE); download it once online, or point "
                            "HF_HOME at a cache that has it")  # fmt: skip
