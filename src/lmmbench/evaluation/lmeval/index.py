"""An index of lm-evaluation-harness's catalogue names (tasks, groups, tags), read from its YAML files without
importing ``lm_eval.tasks``.

lm-eval's ``TaskManager`` reads and validates every task file of the catalogue (about 14 000) before it answers
whether a name exists: 6 to 40 s, on every run. lmmbench answers "is this a catalogue name?" from a line scan of
the same files (each top-level ``task:``, ``group:`` and ``tag:`` and its list items, keys quoted or not, in
included templates too), cached per lm-eval version under ``$LMMBENCH_HOME``: an unknown name is refused in a
fraction of a second and lm-eval's task system is imported only for a run. The scan may list a few names more
than lm-eval (a template's own name: lm-eval refuses it then, as before), never fewer (checked by a test against
``TaskManager().all_tasks``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from functools import lru_cache
from pathlib import Path

__all__ = ["catalogue_index", "lmeval_tasks_dir", "scan_task_names"]

_SKIP = (".py", ".pyc", ".md", ".txt", ".json", ".jsonl", ".csv", ".tsv", ".png", ".jpg", ".ipynb", ".sh")
_TOP = re.compile(r"^[\"']?(task|group|tag)[\"']?\s*:\s*(.*?)\s*$")
_ITEM = re.compile(r"^\s*-\s+(?:[\"']?task[\"']?\s*:\s*)?(.*?)\s*$")


def lmeval_tasks_dir() -> Path | None:
    """lm-eval's ``tasks`` folder, found without importing lm-eval (None when it is not installed)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "tasks"


def _names_in(lines: list[str]) -> tuple[set[str], str | None]:
    """(every name the lines declare, the task name of a top-level scalar ``task:``)."""
    names: set[str] = set()
    task: str | None = None
    for i, line in enumerate(lines):
        found = _TOP.match(line)
        if not found:
            continue
        value = found.group(2).split(" #")[0].strip().strip("'\"")
        if value.startswith("["):
            names.update(x.strip().strip("'\"") for x in value.strip("[]").split(",") if x.strip())
        elif value:
            names.add(value)
            task = value if found.group(1) == "task" else task
        else:
            for nxt in lines[i + 1 :]:
                item = _ITEM.match(nxt)
                if not item:
                    break
                names.add(item.group(1).strip("'\""))
    return names, task


def scan_task_names(root: Path) -> tuple[set[str], dict[str, str]]:
    """(every task, group and tag name the files under ``root`` declare, task name -> its file): a line scan, no
    YAML parse."""
    names: set[str] = set()
    files: dict[str, str] = {}
    for folder, _, found in os.walk(root):
        for name in found:
            if name.endswith(_SKIP):
                continue
            path = Path(folder) / name
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            declared, task = _names_in(text.splitlines())
            names |= declared
            if task is not None and name.endswith((".yaml", ".yml")):
                files.setdefault(task, str(path))
    return names, files


def _cache_file(version: str) -> Path:
    from lmmbench.models.tiny import lmmbench_home

    home = lmmbench_home()
    return home / "cache" / f"lmeval_index-{re.sub(r'[^A-Za-z0-9._-]', '_', version)}.json"


@lru_cache(maxsize=2)
def _installed_index(root: str, version: str) -> tuple[frozenset[str], dict[str, str]]:
    cache = _cache_file(version)
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if data.get("root") == root and isinstance(data.get("names"), list) and isinstance(data.get("files"), dict):
            return frozenset(str(n) for n in data["names"]), {str(k): str(v) for k, v in data["files"].items()}
    except (OSError, ValueError, AttributeError):
        pass
    names, files = scan_task_names(Path(root))
    try:  # a cache that cannot be written only costs the next run the scan again
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        body = {"root": root, "version": version, "names": sorted(names), "files": files}
        tmp.write_text(json.dumps(body), encoding="utf-8")
        tmp.replace(cache)
    except OSError:
        pass
    return frozenset(names), files


def catalogue_index(include_path: list[Path]) -> tuple[frozenset[str], dict[str, str]] | None:
    """(the names of lm-eval's installed catalogue and of ``include_path``, task name -> its YAML file); None
    without lm-eval."""
    root = lmeval_tasks_dir()
    if root is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("lm_eval")
    except PackageNotFoundError:
        installed = "unknown"
    installed_names, installed_files = _installed_index(str(root), installed)
    names, files = set(installed_names), dict(installed_files)
    for folder in include_path:
        more, more_files = scan_task_names(Path(folder))
        names |= more
        files.update(more_files)  # an --include-path task wins, as in lm-eval
    return frozenset(names), files
