"""Accuracy evaluation: tasks in YAML over local data, prompts, modes all / infer / eval, reference diffs.

Importing this package does not import torch; the model is loaded when a run needs it.
"""

from lmmbench.evaluation.modes import EvalConfig, EvalRun, make_backend, run_eval
from lmmbench.evaluation.task_config import TaskConfig, load_task_file
from lmmbench.evaluation.task_registry import SHIPPED_TASKS_DIR, TASKS, list_tasks, resolve_task

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
