"""Options of ``lmmbench perf`` that send evaluation tasks as the workload (AISBench's ``--mode perf``):
``--tasks``, quality under load (``--score``, ``--correct-if``) and several models per run (``--models``)."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from pydantic import BaseModel, Field, field_validator, model_validator

__all__ = ["TaskLoadOptions", "parse_correct_if"]

_CORRECT_IF = re.compile(r"^\s*([A-Za-z_][\w,.-]*)\s*>=\s*([-+0-9.eE]+)\s*$")


def parse_correct_if(text: str) -> tuple[str, float]:
    """``METRIC>=X`` as (metric, threshold); ValueError on anything else."""
    m = _CORRECT_IF.match(text)
    if m is None:
        raise ValueError(f"--correct-if {text!r}: write METRIC>=X, e.g. f1>=0.5")
    try:
        value = float(m.group(2))
    except ValueError:
        raise ValueError(f"--correct-if {text!r}: {m.group(2)!r} is not a number; e.g. f1>=0.5") from None
    if not math.isfinite(value):
        raise ValueError(f"--correct-if {text!r}: the threshold must be a finite number, e.g. f1>=0.5")
    return m.group(1), value


class TaskLoadOptions(BaseModel):
    """Evaluation tasks as a perf workload, their answers scored per load point, several models per run."""

    CLI_PANEL: ClassVar[tuple[str, ...]] = ("tasks", "task_limit", "num_fewshot", "gen_kwargs", "system_instruction",
                                            "apply_chat_template", "fewshot_as_multiturn", "prompt", "score",
                                            "correct_if", "models")  # fmt: skip
    #: eval's prompt and generation options, passed to eval's own code as `eval` takes them
    EVAL_OPTIONS: ClassVar[tuple[str, ...]] = ("num_fewshot", "gen_kwargs", "system_instruction",
                                               "apply_chat_template", "fewshot_as_multiturn", "prompt")  # fmt: skip

    tasks: list[str] = Field(
        default_factory=list, description="Evaluation tasks (names, task YAML files, lm-eval catalogue names, "
        "multimodal benchmarks) whose requests, exactly as `eval --model URL` sends them, are the workload; "
        "several tasks are merged into one stream.")  # fmt: skip
    task_limit: int | None = Field(None, ge=1, description="--tasks: only the first N documents of each task.")
    score: bool = Field(False, description="--tasks: score every answer with its task's metric and report "
                        "accuracy per load point (with its interval) and correct goodput.")
    correct_if: str | None = Field(None, description="--score with a continuous metric (f1, anls, bleu...): "
                                   "METRIC>=X counts a request as correct, e.g. f1>=0.5.")
    models: dict[str, str] = Field(default_factory=dict, description="Several endpoints in one run, NAME=URL,"
                                   "NAME=URL: one run folder per model and one comparison table.")
    num_fewshot: int | None = Field(None, ge=0, description="--tasks: the tasks' few-shot count (as eval's "
                                    "--num-fewshot; --seed seeds the few-shot draw as eval's --seed does).")
    gen_kwargs: str | None = Field(None, description="--tasks: generation settings, e.g. max_gen_toks=16,"
                                   "temperature=0 (as eval's --gen_kwargs).")
    system_instruction: str | None = Field(None, description="--tasks: a system instruction before every prompt "
                                           "(as eval's --system_instruction).")
    apply_chat_template: bool = Field(False, description="--tasks: prompts in the model's chat template (as eval's "
                                      "--apply_chat_template; needs --tokenizer).")
    fewshot_as_multiturn: bool = Field(False, description="--tasks: few-shot examples as chat turns (as eval's "
                                       "--fewshot_as_multiturn).")
    prompt: str | None = Field(None, description="--tasks: a registered prompt (name@version) asked instead of each "
                               "task's own (as eval's --prompt).")

    @field_validator("correct_if")
    @classmethod
    def _check_correct_if(cls, v: str | None) -> str | None:
        if v is not None:
            parse_correct_if(v)
        return v

    @field_validator("models", mode="before")
    @classmethod
    def _check_models(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for name, url in v.items():
                if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(name)):
                    raise ValueError(f"--models: {name!r} is not a run name (letters, digits, _ . -)")
                if not str(url).startswith(("http://", "https://")):
                    raise ValueError(f"--models {name}={url}: the URL must start with http:// or https://")
        return v

    @model_validator(mode="after")
    def _needs_tasks(self) -> TaskLoadOptions:
        if not self.tasks:
            used = [f for f in ("task_limit", "score", "correct_if", *self.EVAL_OPTIONS)
                    if getattr(self, f) not in (None, False)]  # fmt: skip
            if used:
                raise ValueError(f"{', '.join('--' + f.replace('_', '-') for f in used)} act on --tasks: give "
                                 "--tasks T1,T2 (evaluation tasks as the workload)")
        return self
