"""Reading a task file: lmmbench's own YAML (validated into ``TaskConfig``) or an lm-evaluation-harness
task file (translated by ``lmeval_tasks``), every problem one error naming the file and its line or field.

It sits above ``task_config`` (the schema) and ``lmeval_tasks`` (the translator, which builds a
``TaskConfig``), so neither of those imports the other's caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lmmbench.config.input_files import load_yaml, read_text
from lmmbench.core.errors import UserError, user_error_from_validation
from lmmbench.evaluation.lmeval import tasks as lmeval_tasks
from lmmbench.evaluation.task_config import TaskConfig, with_prompt

__all__ = ["load_task_file"]


def _yaml_line(path: Path, text: str, loc: tuple[Any, ...]) -> str:
    """`file:line` for the first key of ``loc`` found in the YAML text (best effort)."""
    if loc:
        key = str(loc[-1] if not isinstance(loc[-1], int) else loc[0])
        for i, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith(f"{key}:"):
                return f"{path}:{i}"
    return str(path)


def load_task_file(path: Path) -> TaskConfig:
    """Read and validate a task YAML; every problem is one error naming the file and line or field."""
    text = read_text(path, "task file")
    data = load_yaml(text, path, tags=lmeval_tasks.LMEVAL_YAML_TAGS)  # lm-eval's `!function` tags are read, never run
    if not isinstance(data, dict):
        raise UserError(f"{path}: a task file must be a mapping with 'task', 'kind' and 'data'")
    if lmeval_tasks.is_lmeval_mapping(data):  # an lm-evaluation-harness task file, read as it is
        raw = lmeval_tasks.resolve_includes(path, lmeval_tasks.read_lmeval_yaml(path))
        if isinstance(raw.get("task"), list):
            raise UserError(f"{path}: an lm-eval group file; pass it to `lmmbench eval --tasks`")
        return lmeval_tasks.task_from_lmeval(path, raw)
    for key, value in data.items():
        lmeval_tasks.find_functions(value, key, path)
    data.setdefault("task", path.stem)
    try:
        cfg = TaskConfig.model_validate({**data, "base_dir": path.parent, "source_file": str(path)})
    except ValidationError as exc:
        where = _yaml_line(path, text, tuple(exc.errors()[0]["loc"]))
        raise user_error_from_validation(exc, where, field="field '{}'", root="field '(root)'", more=True) from None
    from lmmbench.metrics.accuracy import get_metric

    for m in cfg.default_metrics():
        get_metric(m.name, cfg.kind, f"{path}: metrics")
    if cfg.kind == "multiple_choice" and cfg.doc_to_choice is None:
        raise UserError(f"{path}: field 'doc_to_choice' is required for multiple_choice tasks")
    if cfg.prompt is not None:
        if cfg.doc_to_text:
            raise UserError(f"{path}: give 'prompt' (a registered name@version) or 'doc_to_text', not both")
        cfg = with_prompt(cfg, cfg.prompt, path.parent)
    return cfg
