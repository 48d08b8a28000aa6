"""The task registry: shipped sample tasks, tasks in $LMMBENCH_HOME/tasks, and plugins.

A registry entry is the path of a task YAML. ``resolve_task`` takes a registered name or a path to a
YAML file; ``list_tasks`` describes every known task for ``lmmbench tasks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry
from lmmbench.evaluation.task_config import TaskConfig
from lmmbench.evaluation.task_files import load_task_file
from lmmbench.models.tiny import lmmbench_home

if TYPE_CHECKING:
    from lmmbench.evaluation.lmeval.groups import TaskSelection

__all__ = ["SHIPPED_TASKS_DIR", "TASKS", "TaskInfo", "list_tasks", "resolve_selection", "resolve_task"]

SHIPPED_TASKS_DIR = Path(__file__).parent / "tasks"
TASKS: Registry[Path] = Registry("tasks")
_scanned: set[Path] = set()


def _scan() -> None:
    for folder in (SHIPPED_TASKS_DIR, lmmbench_home() / "tasks"):
        if folder in _scanned or not folder.is_dir():
            continue
        _scanned.add(folder)
        for path in sorted(folder.glob("*.yaml")):
            if path.stem not in TASKS:
                TASKS.add(path.stem, path)


@dataclass
class TaskInfo:
    """One line of ``lmmbench tasks``."""

    name: str
    kind: str
    samples: int | None
    metrics: list[str]
    path: Path
    licence: str | None
    error: str | None = None


def resolve_task(name_or_path: str) -> TaskConfig:
    """A task by registered name, or from a YAML path."""
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or p.is_file():
        return load_task_file(p)
    _scan()
    if name_or_path not in TASKS:
        known = ", ".join(TASKS.names()) or "(none)"
        raise UserError(f"unknown task '{name_or_path}' (not a registered name nor a YAML file); known: {known}")
    return load_task_file(TASKS.get(name_or_path))


def resolve_selection(names: list[str], include_paths: list[Path] | None = None) -> TaskSelection:
    """The tasks (and lm-eval groups) of ``--tasks``: lm-eval names in ``include_paths`` first, then
    registered names, then YAML paths (lmmbench's or lm-eval's format, task or group file)."""
    from lmmbench.evaluation.lmeval.groups import LmEvalIndex, TaskSelection, load_by_name, load_lmeval_file
    from lmmbench.evaluation.lmeval.tasks import is_lmeval_mapping, read_lmeval_yaml

    index = LmEvalIndex(include_paths or [])
    sel = TaskSelection()
    for name in names:
        p = Path(name).expanduser()
        if index.knows(name):
            sel.add(load_by_name(name, index))
        elif p.is_file() and is_lmeval_mapping(read_lmeval_yaml(p)):
            sel.add(load_lmeval_file(p, index))
        else:
            sel.add(TaskSelection([resolve_task(name)]))
    return sel


def list_tasks() -> list[TaskInfo]:
    """Every registered task, with its kind and sample count (or the error that stops it loading)."""
    from lmmbench.evaluation.task_data import load_samples

    _scan()
    out = []
    for name in TASKS.names():
        path = TASKS.get(name)
        try:
            cfg = load_task_file(path)
            n: int | None = len(load_samples(cfg))
            out.append(TaskInfo(name, cfg.kind, n, [m.name for m in cfg.default_metrics()], path, cfg.licence))
        except UserError as exc:
            out.append(TaskInfo(name, "?", None, [], path, None, str(exc)))
    return out
