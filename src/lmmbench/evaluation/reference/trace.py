"""One prompt through an in-process engine (any registered in ``ENGINES``), at batch 1, for ByteMLPerf's accuracy
check: the first token's logits from the engine's prefill, free-running greedy generation through its decode
(each step's maximum logit and top-k log-probabilities), and the prompt's perplexity (its tokens fed one by one
through decode, teacher-forced). Only the engine's ``prepare`` / ``prefill`` / ``decode`` / ``release`` are used,
as the scheduler uses them, so a vendor's engine is checked on its own kernels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Trace", "engine_trace", "perplexity", "top_logprobs"]


@dataclass
class Trace:
    """What one prompt produced on one engine."""

    prompt_ids: list[int]
    first_logits: Any  # numpy float32 [vocab]: the prefill's last-position logits
    ppl: float | None = None  # over the prompt's tokens; None for a one-token prompt or when not asked
    prompt_logprobs: list[float] = field(default_factory=list)  # log-prob of prompt token i + 1 given the ones before
    generated_ids: list[int] = field(default_factory=list)  # free-running greedy
    max_logits: list[float] = field(default_factory=list)  # step s: max of the logits that chose generated_ids[s]
    top: list[list[list[Any]]] = field(default_factory=list)  # step s: top-k [token id, log-prob]


def top_logprobs(logits: Any, k: int) -> list[list[Any]]:
    """The ``k`` largest log-probabilities of a logits row: ``[[token id, log-prob], ...]``, best first."""
    import torch

    lp = torch.log_softmax(logits.float(), dim=-1)
    values, ids = lp.topk(min(k, lp.shape[-1]))
    return [[int(i), float(v)] for i, v in zip(ids.tolist(), values.tolist(), strict=True)]


def _state(engine: Any, ids: list[int]) -> Any:
    from lmmbench.engines.requests import GenerationRequest, RequestState

    request = GenerationRequest(prompt_token_ids=list(ids))
    return RequestState(request=request, prepared=engine.prepare(request))


def _prompt_logprobs(engine: Any, ids: list[int]) -> list[float]:
    """The log-probability of each of ``ids[1:]``: the first token prefilled, the rest fed through decode."""
    import torch

    if len(ids) < 2:
        return []
    state = _state(engine, ids[:1])
    out: list[float] = []
    try:
        logits = engine.prefill([state])[0]
        for pos in range(1, len(ids)):
            out.append(float(torch.log_softmax(logits.float(), dim=-1)[ids[pos]]))
            if pos == len(ids) - 1:
                break
            state.output_ids.append(ids[pos])
            logits = engine.decode([state])[0]
    finally:
        engine.release([state.request_id])
    return out


def perplexity(logprobs: list[float]) -> float | None:
    """exp(mean negative log-likelihood); None without any token."""
    return math.exp(-sum(logprobs) / len(logprobs)) if logprobs else None


def engine_trace(engine: Any, ids: list[int], steps: int, top_k: int, *, ppl: bool = True,
                 reference_ids: list[int] | None = None) -> Trace:  # fmt: skip
    """Prefill ``ids`` and generate ``steps`` greedy tokens; with ``reference_ids``, stop after the first step
    whose token differs from the reference's (later positions no longer correspond)."""
    state = _state(engine, ids)
    try:
        logits = engine.prefill([state])[0]
        trace = Trace(list(ids), logits.float().cpu().numpy())
        for s in range(steps):
            token = int(logits.argmax())
            trace.generated_ids.append(token)
            trace.max_logits.append(float(logits.max()))
            trace.top.append(top_logprobs(logits, top_k))
            diverged = reference_ids is not None and (s >= len(reference_ids) or token != reference_ids[s])
            if diverged or s == steps - 1:
                break
            state.output_ids.append(token)
            logits = engine.decode([state])[0]
    finally:
        engine.release([state.request_id])
    if ppl:
        trace.prompt_logprobs = _prompt_logprobs(engine, ids)
        trace.ppl = perplexity(trace.prompt_logprobs)
    return trace
