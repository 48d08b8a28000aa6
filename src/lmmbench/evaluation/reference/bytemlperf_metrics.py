"""ByteMLPerf's accuracy measures under its names, as its code computes them today (``llm_perf/core/scheduler.py``
``get_packet_results``, ``llm_perf/utils/reporter.py`` ``calc_perplexity`` / ``_calc_accuracy``), and the top-k
stand-ins lmmbench computes over HTTP under names of its own.

* ``PPL``: one value per prompt. At generation step g (g = 0 .. n-1) the server scores the sequence
  prompt + the first g generated tokens, teacher-forced: exp(mean negative log-likelihood of its tokens 1 ..
  end); the prompt's PPL is the mean of those n values.
* ``Logits Diff``: the first generated token's full-vocabulary logits of each prompt against the reference's:
  ``Max Difference`` the largest absolute difference over all prompts, ``Mean Squared Error`` /
  ``Mean Absolute Error`` per prompt then averaged, ``Cosine Similarity`` per prompt then averaged.
* ``Token Diff``: per generation step the largest logit (greedy: the chosen token's) against the reference's at
  the same step, over the first 16 prompts whose generations have the reference's length (ByteMLPerf skips a
  prompt of another shape): ``Max Difference`` the largest absolute difference, ``Prompt Num`` the prompts.
* Over HTTP a server returns top-k log-probabilities, never logits: ``topk_logprob_max_diff`` (largest absolute
  difference of the log-probabilities both sides list at the first step) and ``topk_logprob_cosine`` (their
  cosine per prompt, averaged) are lmmbench's, and ByteMLPerf's names stay null with the reason.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["TOKEN_DIFF_LIMIT", "logits_diff", "prompt_ppl", "token_diff", "topk_first_step"]

#: ByteMLPerf's reporter: ``max_token_diff_num = 16``.
TOKEN_DIFF_LIMIT = 16


def prompt_ppl(prompt_logprobs: list[float], generated_logprobs: list[float]) -> float | None:
    """ByteMLPerf's PPL of one prompt: the mean over generation steps g of exp(-(sum of the prompt's token
    log-probabilities + the first g generated tokens') / their count). None when a step has no token to score."""
    if not generated_logprobs:
        return None
    values = []
    total, count = sum(prompt_logprobs), len(prompt_logprobs)
    for g in range(len(generated_logprobs)):
        if count + g == 0:
            return None  # a one-token prompt at step 0: nothing to score (ByteMLPerf's loss is NaN there)
        values.append(math.exp(-(total + sum(generated_logprobs[:g])) / (count + g)))
    return sum(values) / len(values)


def _cosine(a: Any, b: Any) -> float | None:
    import numpy as np

    norm = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm > 0 else None


def logits_diff(here_first: Any, ref_first: Any) -> dict[str, Any]:
    """ByteMLPerf's ``Logits Diff`` of first-token logits (``[prompts, vocab]`` each, row i against row i)."""
    import numpy as np

    here, ref = np.asarray(here_first, dtype=np.float64), np.asarray(ref_first, dtype=np.float64)
    per = []
    for h, r in zip(here, ref, strict=True):
        d = r - h  # ByteMLPerf: base - backend
        per.append((float(np.abs(d).max()), float(np.mean(d * d)), float(np.mean(np.abs(d))), _cosine(r, h)))
    cos = [c for *_r, c in per if c is not None]
    return {"Max Difference": max(p[0] for p in per) if per else None,
            "Mean Squared Error": sum(p[1] for p in per) / len(per) if per else None,
            "Mean Absolute Error": sum(p[2] for p in per) / len(per) if per else None,
            "Cosine Similarity": sum(cos) / len(cos) if cos else None, "Prompt Num": len(per)}  # fmt: skip


def token_diff(here_max: list[list[float]], ref_max: list[list[float]], limit: int = TOKEN_DIFF_LIMIT
               ) -> tuple[dict[str, Any], list[list[float]]]:  # fmt: skip
    """ByteMLPerf's ``Token Diff`` of per-step maximum logits, and each compared prompt's absolute differences."""
    diffs: list[list[float]] = []
    for h, r in zip(here_max, ref_max, strict=False):
        if len(diffs) >= limit:
            break
        if len(h) != len(r) or not h:
            continue  # ByteMLPerf: a shape mismatch is skipped (its generation ended at another length)
        diffs.append([abs(float(a) - float(b)) for a, b in zip(r, h, strict=True)])
    top = max((max(d) for d in diffs), default=None)
    return {"Max Difference": top, "Prompt Num": len(diffs)}, diffs


def topk_first_step(pairs: list[list[tuple[float, float]]]) -> dict[str, Any]:
    """lmmbench's top-k stand-ins at the first step: per prompt, the (here, reference) log-probabilities of the
    tokens both top-k lists hold."""
    per_cos = [c for c in (_cosine([h for h, _r in p], [r for _h, r in p]) for p in pairs if p) if c is not None]
    diffs = [abs(h - r) for p in pairs for h, r in p]
    return {"topk_logprob_max_diff": max(diffs) if diffs else None,
            "topk_logprob_cosine": sum(per_cos) / len(per_cos) if per_cos else None,
            "prompts": len(pairs), "values_compared": len(diffs)}  # fmt: skip
