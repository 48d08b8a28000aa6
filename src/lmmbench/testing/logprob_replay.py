"""Log-probabilities for the test server: ``/v1/completions`` with ``logprobs`` answered from a ``reference dump``
folder (``--logprobs-reference``), as a server running the reference's model would answer, with injected
differences: every log-probability shifted by ``--logprob-shift``, and from step ``--diverge-at-step`` on the
second-best token generated instead of the best. With ``echo`` it scores the prompt (each token's reference
log-prob, shifted), as vLLM answers lm-eval's log-likelihood requests. Tests of ``reference compare --url``
check that exactly these come out. The prompt must be one of the reference's, sent as its token ids."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from lmmbench.config.perf.testserver import TestServerConfig

__all__ = ["logprob_answer"]


@functools.lru_cache(maxsize=4)
def _prompts(folder: str) -> dict[tuple[int, ...], dict[str, Any]]:
    meta = json.loads((Path(folder) / "reference.json").read_text(encoding="utf-8"))
    return {tuple(int(t) for t in p["prompt_ids"]): p for p in meta["prompts"]}


def _key(entry: list[Any], as_ids: bool) -> str:
    return f"token_id:{int(entry[0])}" if as_ids else str(entry[2])


def logprob_answer(cfg: TestServerConfig, req: dict[str, Any], rid: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) of a completion request with ``logprobs``, replayed from the reference."""
    assert cfg.logprobs_reference is not None
    prompt = req.get("prompt")
    rec = _prompts(str(cfg.logprobs_reference)).get(tuple(prompt)) if isinstance(prompt, list) else None
    if rec is None:
        return 400, {"error": {"message": "prompt is not one of the reference's (send its token ids)"}}
    if req.get("echo"):
        return 200, _echo_answer(cfg, rec, rid)
    k = int(req.get("logprobs") or 0)
    as_ids = bool(req.get("return_tokens_as_token_ids"))
    steps = min(int(req.get("max_tokens") or 1), len(rec["top_logprobs"]))
    tokens, token_lps, tops = [], [], []
    for s in range(steps):
        top = rec["top_logprobs"][s]
        diverged = cfg.diverge_at_step is not None and s >= cfg.diverge_at_step and len(top) > 1
        chosen = top[1] if diverged else top[0]
        tokens.append(_key(chosen, as_ids))
        token_lps.append(float(chosen[1]) + cfg.logprob_shift)
        tops.append({_key(e, as_ids): float(e[1]) + cfg.logprob_shift for e in top[:k]})
    text = "".join(str(rec["top_logprobs"][s][0][2]) for s in range(steps))
    choice = {"index": 0, "text": text, "finish_reason": "length",
              "logprobs": {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops}}  # fmt: skip
    usage = {"prompt_tokens": len(prompt or []), "completion_tokens": steps,
             "total_tokens": len(prompt or []) + steps}  # fmt: skip
    return 200, {"id": rid, "object": "text_completion", "model": cfg.model, "choices": [choice], "usage": usage}


def _echo_answer(cfg: TestServerConfig, rec: dict[str, Any], rid: str) -> dict[str, Any]:
    """The prompt scored (``echo``): each prompt token's reference log-prob, shifted; the first has none."""
    ids = [int(t) for t in rec["prompt_ids"]]
    lps: list[float | None] = [None, *(float(x) + cfg.logprob_shift for x in rec["prompt_logprobs"])]
    logprobs = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": lps,
                "top_logprobs": [None, *({f"token_id:{t}": lp} for t, lp in zip(ids[1:], lps[1:], strict=True))]}
    choice = {"index": 0, "text": "", "finish_reason": "length", "logprobs": logprobs}
    return {"id": rid, "object": "text_completion", "model": cfg.model, "choices": [choice],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}}
