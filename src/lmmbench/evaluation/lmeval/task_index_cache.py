"""lm-eval's own task index of its installed catalogue, kept on disk between runs.

``lm_eval.tasks.TaskManager()`` builds its index with ``TaskIndex.build`` (``lm_eval/tasks/_index.py``, read as of
lm-eval 0.4.13): every YAML file of every task folder parsed, includes resolved, 14 683 entries from lm-eval's own
``tasks`` folder, 15.5 CPU-s on a 2-core AMD EPYC, on every run that evaluates a catalogue task. ``build`` indexes
each folder on its own and merges them in order, a later folder's name replacing an earlier one's; so the entries
of lm-eval's installed folder are the same for every run with that installation, and lmmbench keeps them on disk
(a pickle, 16 MB, 1.4 s to load) under ``$LMMBENCH_HOME/cache``, keyed by lm-eval's version, the folder's path and
its files' count, total size and newest modification time (an edited or reinstalled catalogue is indexed again).
``--include-path`` folders (the user's, small, edited often) are indexed afresh on every run, as lm-eval does.
lm-eval's own ``TaskManager`` is made for the include folders alone and given the merged index (see
``cached_task_manager``); lm-eval's classes are not changed (tests/test_no_dependency_patches.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cached_task_manager", "folder_fingerprint", "merge_entries"]

_log = logging.getLogger("lm_eval.tasks._index")  # lm-eval's own logger for this warning
_IGNORED_DIRS = {"__pycache__", ".ipynb_checkpoints"}


def folder_fingerprint(root: Path) -> str:
    """The count, total size and newest modification time (ns) of the files under ``root`` (caches ignored)."""
    count = size = newest = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _IGNORED_DIRS]
        for name in files:
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime_ns)
    return f"{count}-{size}-{newest}"


def _cache_file(root: Path, version: str) -> Path:
    from lmmbench.models.tiny import lmmbench_home

    home = lmmbench_home()
    key = hashlib.sha256(f"{version}\0{root.resolve()}\0{folder_fingerprint(root)}".encode()).hexdigest()[:16]
    return home / "cache" / f"lmeval_task_index-{key}.pkl"


def _installed_entries(root: Path, version: str, build: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """lm-eval's entries for its own ``root``: from the cache when it matches, else built and stored."""
    cache = _cache_file(root, version)
    try:
        with cache.open("rb") as fh:
            entries = pickle.load(fh)
        if isinstance(entries, dict) and entries:
            return entries
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        pass  # no cache, or one another lm-eval wrote: index again
    entries = build([root])
    try:  # a cache that cannot be written only costs the next run the index again
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        with tmp.open("wb") as fh:
            pickle.dump(entries, fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(cache)
    except OSError:
        pass
    return entries


def merge_entries(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Folders' entries merged in order, a later folder's name replacing an earlier one's (with lm-eval's warning),
    as ``TaskIndex.build`` merges them."""
    merged: dict[str, Any] = {}
    for part in parts:
        for name, entry in part.items():
            if name in merged:
                _log.warning("Task '%s' from %s overrides existing task from %s", name, entry.yaml_path,
                             merged[name].yaml_path)  # fmt: skip
            merged[name] = entry
    return merged


#: What ``TaskManager.__init__`` (lm-eval 0.4.13) sets on the instance; another set means another lm-eval, whose
#: manager is then built as it builds itself.
_MANAGER_FIELDS = {"include_path", "metadata", "_factory", "_index", "_all_tasks", "_all_subtasks", "_all_groups",
                   "_all_tags"}  # fmt: skip


def cached_task_manager(include_path: tuple[str, ...]) -> Any:
    """``lm_eval.tasks.TaskManager(include_path=...)``, its index of lm-eval's own folder from the cache: the
    manager is made by lm-eval for the include folders alone (``include_defaults=False``), and the catalogue's
    entries go under them, with the name lists ``__init__`` derives from the index. Nothing of lm-eval's classes
    is changed; an lm-eval whose manager has other fields gets its own full build."""
    from importlib.metadata import PackageNotFoundError, version

    import lm_eval.tasks as lm_tasks
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._index import Kind, TaskIndex

    paths = list(include_path) or None
    try:
        installed = version("lm_eval")
        manager = TaskManager(include_path=paths, include_defaults=False)
    except (PackageNotFoundError, TypeError):
        return TaskManager(include_path=paths)
    if set(vars(manager)) != _MANAGER_FIELDS:
        return TaskManager(include_path=paths)
    own = _installed_entries(Path(lm_tasks.__file__).parent.resolve(), installed, TaskIndex.build)
    index = merge_entries([own, manager.task_index])  # defaults first, then include_path, as __init__ orders them
    kinds: dict[Any, list[str]] = {}
    for name, entry in index.items():
        kinds.setdefault(entry.kind, []).append(name)
    manager._index = index
    manager._all_tasks = sorted(index)
    manager._all_subtasks = sorted(kinds.get(Kind.TASK, []) + kinds.get(Kind.PY_TASK, []))
    manager._all_groups = sorted(kinds.get(Kind.GROUP, []))
    manager._all_tags = sorted(kinds.get(Kind.TAG, []))
    return manager
