"""eval's generation and prompt options on every task kind: honoured, or refused where they cannot act.

``--gen_kwargs`` (lm-eval's ``k=v,k=v``, values typed as lm-eval types them), ``--system_instruction``,
``--apply_chat_template``, ``--fewshot_as_multiturn``, ``--seed`` and ``--prompt`` act on lmmbench's own tasks and
lm-eval task files (through their ``TaskConfig``), on lmms-eval's multimodal benchmarks (``GenSettings``) and on
lm-eval catalogue tasks (lm-eval's ``simple_evaluate`` takes them). An option that no task of the run can act on is
refused before the model loads (exit 2, one line naming it); ``refusals`` lists those lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.evaluation.eval_config import EvalConfig
from lmmbench.evaluation.task_config import TaskConfig

__all__ = ["GEN_KEYS", "GenSettings", "apply_to_task", "check_options", "parse_gen_kwargs", "request_seed"]

#: lm-eval's max-token spellings, in its priority order
MAX_TOKEN_KEYS = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
#: the generation keys lmmbench acts on (any other is refused, never passed on and ignored)
GEN_KEYS = (*MAX_TOKEN_KEYS, "until", "temperature", "do_sample", "top_p", "top_k")
_HINT = "give key=value pairs, e.g. --gen_kwargs max_gen_toks=16,temperature=0"


def _typed(value: str) -> Any:
    """lm-eval's ``handle_arg_string``: quoted -> str, true/false/none, int, float, else the text."""
    v = value.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    if v.lstrip("+-").isdigit() and v not in ("+", "-"):
        return int(v)
    try:
        return float(v)
    except ValueError:
        return v


def _check_value(key: str, value: Any) -> None:
    flag = f"--gen_kwargs {key}={value}"
    if key in MAX_TOKEN_KEYS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{flag}: a whole number of tokens >= 1")
        from lmmbench.config.limits import check_limit

        check_limit("output_tokens", value, f"--gen_kwargs {key}")
    elif key in ("temperature", "top_p"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UserError(f"{flag}: a finite number")
        if key == "temperature" and value < 0:
            raise UserError(f"{flag}: must be >= 0 (0 is greedy)")
        if key == "top_p" and not 0 < value <= 1:
            raise UserError(f"{flag}: must be in (0, 1]")
    elif key == "top_k" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise UserError(f"{flag}: a whole number >= 0 (0 turns top-k off)")
    elif key == "do_sample" and not isinstance(value, bool):
        raise UserError(f"{flag}: true or false")
    elif key == "until" and (not isinstance(value, str) or not value):
        raise UserError(f"{flag}: a stop string")


def parse_gen_kwargs(text: str | None) -> dict[str, Any]:
    """``--gen_kwargs`` as lm-eval parses it, every key and value checked (one line naming the bad part)."""
    out: dict[str, Any] = {}
    for part in [p for p in (text or "").split(",") if p.strip()]:
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or not raw.strip():
            raise UserError(f"--gen_kwargs {part.strip()}: no value; {_HINT}")
        if key not in GEN_KEYS:
            raise UserError(f"--gen_kwargs {key}: not a generation setting lmmbench acts on (it knows "
                            f"{', '.join(GEN_KEYS)})")  # fmt: skip
        value = _typed(raw)
        _check_value(key, value)
        out[key] = value
    if text is not None and not out:
        raise UserError(f"--gen_kwargs {text!r}: nothing to set; {_HINT}")
    return out


@dataclass
class GenSettings:
    """Generation settings of the run's ``--gen_kwargs`` / ``--system_instruction`` / ``--seed``."""

    max_tokens: int | None = None
    stop: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    system: str | None = None
    seed: int | None = None  # the torch seed of --seed: per-request sampling seeds derive from it

    @classmethod
    def from_config(cls, cfg: EvalConfig) -> GenSettings:
        """The settings ``cfg`` gives (``None`` where it leaves the task's own)."""
        kw = parse_gen_kwargs(cfg.gen_kwargs)
        out = cls(system=cfg.system_instruction, seed=cfg.seed_values()[2] if cfg.seed is not None else None)
        out.max_tokens = next((int(kw[k]) for k in MAX_TOKEN_KEYS if k in kw), None)
        if "until" in kw:
            out.stop = [str(kw["until"])]
        sample = kw.get("do_sample")
        temperature = kw.get("temperature")
        if sample is False or (sample is None and temperature is not None and float(temperature) <= 0):
            out.temperature, out.top_p, out.top_k = 0.0, 1.0, 0  # lm-eval's rule: greedy
        elif temperature is not None or sample:
            out.temperature = float(temperature if temperature is not None else 1.0)
            out.top_p = float(kw["top_p"]) if "top_p" in kw else None
            out.top_k = int(kw["top_k"]) if "top_k" in kw else None
        elif "top_p" in kw or "top_k" in kw:
            raise UserError("--gen_kwargs top_p / top_k: act only when sampling; add temperature=T (> 0) or "
                            "do_sample=true")  # fmt: skip
        return out

    @property
    def samples(self) -> bool:
        """Whether the settings turn sampling on."""
        return bool(self.temperature and self.temperature > 0)


def request_seed(seed: int | None, doc_id: int) -> int | None:
    """A per-sample sampling seed from ``--seed``'s torch seed (the same sample draws the same tokens, alone or
    batched); ``None`` without ``--seed``."""
    return None if seed is None else (seed * 1_000_003 + doc_id) % (2**63)


def apply_to_task(task: TaskConfig, cfg: EvalConfig, gen: GenSettings) -> TaskConfig:
    """``task`` with the run's options applied where its kind can take them."""
    updates: dict[str, Any] = {}
    if task.kind == "generate":
        g = task.generation
        changed = {k: v for k, v in (("max_tokens", gen.max_tokens), ("stop", gen.stop),
                                     ("temperature", gen.temperature), ("top_p", gen.top_p),
                                     ("top_k", gen.top_k), ("seed", gen.seed)) if v is not None}  # fmt: skip
        if changed:
            updates["generation"] = g.model_copy(update=changed)
    if gen.system is not None and task.kind != "loglikelihood_rolling":
        updates["system_prompt"] = gen.system
    if cfg.apply_chat_template and task.kind != "loglikelihood_rolling":
        updates["chat_template"] = True
        updates["fewshot_as_multiturn"] = cfg.fewshot_as_multiturn  # lm-eval's default: one user turn
    if cfg.seed is not None:
        updates["fewshot"] = task.fewshot.model_copy(update={"seed": cfg.seed_values()[3]})
    return task.model_copy(update=updates) if updates else task


def _refuse(flag: str, why: str) -> str:
    return f"{flag}: {why}"


def refusals(cfg: EvalConfig, own: list[TaskConfig], catalogue_kinds: list[str | None], lmms: list[str]) -> list[str]:
    """One line per option that no task of the run can act on (``catalogue_kinds``: lm-eval output types of the
    catalogue tasks, ``None`` for a group or tag whose tasks are not known yet)."""
    out: list[str] = []
    gen = GenSettings.from_config(cfg)
    generating = any(t.kind == "generate" for t in own) or bool(lmms) or any(
        k in (None, "generate_until") for k in catalogue_kinds)
    names = ", ".join([t.task for t in own] + [k or "?" for k in catalogue_kinds]) or "none"
    if cfg.gen_kwargs is not None and not generating:
        out.append(_refuse("--gen_kwargs", f"no task of this run generates (log-likelihood tasks only: {names})"))
    chat_ok = any(t.kind != "loglikelihood_rolling" for t in own) or bool(catalogue_kinds)
    if cfg.system_instruction is not None and not (chat_ok or lmms):
        out.append(_refuse("--system_instruction", "rolling-perplexity tasks take no prompt"))
    if cfg.apply_chat_template and not chat_ok:
        out.append(_refuse("--apply_chat_template", "no task of this run takes a chat template (rolling perplexity "
                           "never does; lmms-eval benchmarks are always asked as chat)"))
    if cfg.fewshot_as_multiturn and not cfg.apply_chat_template:
        out.append(_refuse("--fewshot_as_multiturn", "acts only with --apply_chat_template (as in lm-eval)"))
    elif cfg.fewshot_as_multiturn and not catalogue_kinds and not any(
            t.fewshot.num > 0 and t.kind != "loglikelihood_rolling" for t in own):
        out.append(_refuse("--fewshot_as_multiturn", "no task of this run has few-shot examples (--num_fewshot)"))
    if cfg.seed is not None and not catalogue_kinds and not gen.samples and not any(
            t.fewshot.num > 0 for t in own) and not any(t.kind == "generate" and t.generation.temperature > 0
                                                          for t in own):
        out.append(_refuse("--seed", "nothing of this run is random (no few-shot examples, greedy generation)"))
    if cfg.prompt is not None and (catalogue_kinds or lmms):
        which = ", ".join([*([f"{len(catalogue_kinds)} lm-eval catalogue task(s)"] if catalogue_kinds else []),
                           *lmms])  # fmt: skip
        out.append(_refuse("--prompt", f"replaces the prompt of lmmbench's own tasks and task files only, not of "
                           f"{which}; run those without --prompt"))
    if cfg.num_fewshot and lmms:  # lmms-eval's benchmarks are zero-shot: beside other tasks it would act on half
        out.append(_refuse("--num_fewshot", f"the lmms-eval benchmarks ({', '.join(lmms)}) are asked zero-shot, as "
                           "lmms-eval asks them; run them without --num_fewshot (apart from the other tasks)"))
    return out


def check_options(cfg: EvalConfig, own: list[TaskConfig], catalogue_kinds: list[str | None], lmms: list[str]) -> None:
    """Raise the first refusal of ``refusals`` (exit 2, one line)."""
    lines = refusals(cfg, own, catalogue_kinds, lmms)
    if lines:
        raise UserError(lines[0])
