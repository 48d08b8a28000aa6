"""Accuracy evaluation: tasks in YAML over local data, prompts, modes all / infer / eval, reference diffs.

Importing this package does not import torch; the model is loaded when a run needs it. Its names are
loaded on first use, so the CLI can import ``eval_config`` / ``reference_config`` without the runner.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.evaluation.modes import EvalRun, make_backend, run_eval
    from lmmbench.evaluation.task_config import TaskConfig
    from lmmbench.evaluation.task_files import load_task_file
    from lmmbench.evaluation.task_registry import SHIPPED_TASKS_DIR, TASKS, list_tasks, resolve_task

_WHERE = {
    "EvalConfig": "eval_config",
    "EvalRun": "modes",
    "make_backend": "modes",
    "run_eval": "modes",
    "TaskConfig": "task_config",
    "load_task_file": "task_files",
    "SHIPPED_TASKS_DIR": "task_registry",
    "TASKS": "task_registry",
    "list_tasks": "task_registry",
    "resolve_task": "task_registry",
}

__all__ = [
    "SHIPPED_TASKS_DIR",
    "TASKS",
    "EvalConfig",
    "EvalRun",
    "TaskConfig",
    "list_tasks",
    "load_task_file",
    "make_backend",
    "resolve_task",
    "run_eval",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'lmmbench.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"lmmbench.evaluation.{_WHERE[name]}"), name)
