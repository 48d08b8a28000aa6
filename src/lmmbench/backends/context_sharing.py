"""Log-likelihoods with each distinct context run once, its answer choices on top of its KV cache.

lm-eval's ``HFLM`` runs every (context, continuation) input whole, sharing a forward only between one-token
continuations of one context. A multiple-choice question's context is usually most of each input, so here
each distinct context is run once with its KV cache kept, and the choices' continuation tokens run on top
of that cache, batched; the vocabulary projection is applied only at the positions lm-eval reads. What the
model computes at every position is the same; only the float32 rounding of the attention over a cache
differs from the whole-input forward (measured: tests/eval/test_context_sharing.py).

Groups whose choices are one token each (MMLU's letters), or with a single choice, need no cache: their
inputs are right-padded into ordinary batches, as before.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmmbench.engines.cache_names import cache_kwarg, returned_cache

__all__ = ["ContextGroup", "continuation_score", "group_by_context", "score_with_shared_contexts"]

Progress = Callable[[int], None]


@dataclass
class ContextGroup:
    """The requests of one context: the tokens fed after it (a continuation minus its last token) -> requests."""

    prefix: tuple[int, ...]
    suffixes: dict[tuple[int, ...], list[int]] = field(default_factory=dict)

    @property
    def rows(self) -> list[tuple[int, ...]]:
        """The distinct non-empty suffixes."""
        return [s for s in self.suffixes if s]

    @property
    def size(self) -> int:
        """How many requests the group answers."""
        return sum(len(v) for v in self.suffixes.values())


def group_by_context(pairs: Sequence[tuple[list[int], list[int]]], max_length: int) -> list[ContextGroup] | None:
    """Requests grouped by the input tokens before their first continuation position (lm-eval's input,
    ``(ctx + cont)[-(max_length + 1):][:-1]``, cut there); None when a continuation is longer than its input."""
    groups: dict[tuple[int, ...], ContextGroup] = {}
    for i, (ctx, cont) in enumerate(pairs):
        if not cont:
            raise ValueError("empty continuation")
        key = (ctx + cont)[-(max_length + 1) :][:-1]
        first = len(key) - len(cont)  # the position whose logits predict cont[0]
        if first < 0:
            return None
        prefix = tuple(key[: first + 1])
        group = groups.setdefault(prefix, ContextGroup(prefix))
        group.suffixes.setdefault(tuple(key[first + 1 :]), []).append(i)
    return sorted(groups.values(), key=lambda g: (-len(g.prefix), g.prefix))


def continuation_score(logprobs: Any, cont: list[int], device: Any) -> tuple[float, bool]:
    """(sum of the continuation's log-probs, whether each is the argmax) from its rows of ``logprobs``
    (one row per continuation token)."""
    import torch

    cont_t = torch.tensor(cont, dtype=torch.long, device=device).unsqueeze(0)
    sel = logprobs.unsqueeze(0)
    greedy = bool((sel.argmax(dim=-1) == cont_t).all())
    ll = torch.gather(sel, 2, cont_t.unsqueeze(-1)).squeeze(-1)
    return float(ll.sum()), greedy


def _score_whole_chunk(
    scorer: Any, hidden: Any, chunk: list[list[ContextGroup]], pairs: Sequence[Any], out: list[Any]
) -> None:
    """Groups with at most one non-empty suffix, each run as one input (row ``r`` of ``hidden`` holds the
    groups ``chunk[r]``): the positions every request reads, projected to the vocabulary in one matmul (the
    projection reads all its weights for each call, so one call per batch, not one per row)."""
    import torch

    spans = []
    for row, groups in zip(hidden, chunk, strict=True):
        for group in groups:
            start = len(group.prefix) - 1
            spans.append((group, row[start : start + max(len(s) for s in group.suffixes) + 1]))
    with torch.no_grad():
        logits = scorer.model.get_output_embeddings()(torch.cat([span for _, span in spans]))
        logprobs = torch.nn.functional.log_softmax(logits, dim=-1)
    at = 0
    for group, span in spans:
        for suffix, idx in group.suffixes.items():
            for i in idx:
                out[i] = continuation_score(logprobs[at : at + len(suffix) + 1], pairs[i][1], scorer.device)
        at += len(span)


def _score_cached(scorer: Any, group: ContextGroup, pairs: Sequence[Any], out: list[Any]) -> bool:
    """A group with several choices: its context once with the KV cache, then the choices batched on the
    cache (``batch_size`` rows a forward). False when the model gives no cache (nothing written then)."""
    import torch

    first = scorer._forward_hidden_output([list(group.prefix)], use_cache=True)
    kept = returned_cache(first)
    if kept is None or not hasattr(kept, "batch_repeat_interleave"):
        return False
    rows = group.rows
    parts = [first.hidden_states[-1][0, -1:]]
    for at in range(0, len(rows), scorer.batch_size):
        chunk = rows[at : at + scorer.batch_size]
        cache = kept if at + scorer.batch_size >= len(rows) else copy.deepcopy(kept)
        cache.batch_repeat_interleave(len(chunk))
        try:
            with torch.no_grad():
                hidden = scorer.model(
                    scorer._input([list(r) for r in chunk]),  # right-padded: causal, so pads are never attended
                    use_cache=True,
                    output_hidden_states=True,
                    logits_to_keep=1,
                    **{cache_kwarg(scorer.model): cache},
                ).hidden_states[-1]
        except TypeError:  # a forward that takes no cache in
            return False
        parts.extend(hidden[k, : len(r)] for k, r in enumerate(chunk))
    with torch.no_grad():
        logprobs = torch.nn.functional.log_softmax(scorer.model.get_output_embeddings()(torch.cat(parts)), dim=-1)
    where, at = {}, 1
    for r in rows:
        where[r] = list(range(at, at + len(r)))
        at += len(r)
    for suffix, idx in group.suffixes.items():
        lp = logprobs[[0, *where.get(suffix, [])]]
        for i in idx:
            out[i] = continuation_score(lp, pairs[i][1], scorer.device)
    return True


def score_with_shared_contexts(
    scorer: Any, pairs: Sequence[tuple[list[int], list[int]]], progress: Progress | None = None
) -> list[tuple[float, bool]] | None:
    """(LL, is_greedy) of each pair, every distinct context run once; None (nothing scored, no progress
    reported) when the model cannot be scored this way, so the caller runs each input whole."""
    groups = group_by_context(pairs, scorer.max_length)
    if groups is None:
        return None
    out: list[tuple[float, bool] | None] = [None] * len(pairs)
    for group in (g for g in groups if len(g.rows) > 1):
        if not _score_cached(scorer, group, pairs, out):
            _check_nothing_scored(out)
            return None
        if progress is not None:
            progress(group.size)
    by_input: dict[tuple[int, ...], list[ContextGroup]] = {}
    for g in groups:
        if len(g.rows) <= 1:
            by_input.setdefault(g.prefix + (g.rows[0] if g.rows else ()), []).append(g)
    for chunk in scorer._batches(sorted(by_input, key=lambda k: (-len(k), k))):
        hidden = scorer._forward_hidden([list(k) for k in chunk])
        if hidden is None:
            _check_nothing_scored(out)
            return None
        _score_whole_chunk(scorer, hidden, [by_input[key] for key in chunk], pairs, out)
        if progress is not None:
            progress(sum(g.size for key in chunk for g in by_input[key]))
    return [x for x in out if x is not None]


def _check_nothing_scored(out: list[Any]) -> None:
    """Falling back is only right before anything was scored; the model changing its mind part-way is a bug."""
    if any(x is not None for x in out):
        raise RuntimeError("scoring: the model stopped giving hidden states part-way through")
