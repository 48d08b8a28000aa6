"""Log-likelihoods with each distinct context run once, its answer choices on top of its KV cache.

lm-eval's ``HFLM`` runs every (context, continuation) input whole, sharing a forward only between one-token
continuations of one context. A multiple-choice question's context is usually most of each input, so here
each distinct context is run once with its KV cache kept, and the choices' continuation tokens run on top
of that cache. Both are batched across questions: ``batch_size`` contexts in one right-padded forward, then
their choices, each on its own context's cache rows, with the contexts' padding masked out and positions
counted from each context's own end. The vocabulary projection is applied only at the positions lm-eval
reads, and the last layer's MLP and query / output projections run only there (``backends.read_positions``).
What the model computes at every read position is the same; only the float32 rounding of the attention over a
cache differs from the whole-input forward (measured: tests/eval/test_context_sharing.py).

Groups whose choices are one token each (MMLU's letters), or with a single choice, need no cache: their
inputs are right-padded into ordinary batches, as before.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmmbench.engines.cache_names import cache_kwarg, returned_cache

__all__ = ["ContextGroup", "continuation_score", "group_by_context", "read_index", "score_with_shared_contexts"]

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


def read_index(spans: Sequence[tuple[int, int, int]], width: int, device: Any) -> Any:
    """The flat (row x position) indices of the read spans ``(row, start, end)`` of an input ``width`` wide,
    each position once."""
    import torch

    flat = sorted({row * width + t for row, start, end in spans for t in range(start, end)})
    return torch.tensor(flat, dtype=torch.long, device=device)


def _score_whole_chunk(
    scorer: Any, keys: list[tuple[int, ...]], chunk: list[list[ContextGroup]], pairs: Sequence[Any], out: list[Any]
) -> bool:
    """Groups with at most one non-empty suffix, each input ``keys[r]`` run whole (row ``r`` holds the groups
    ``chunk[r]``): the positions every request reads, projected to the vocabulary in one matmul (the
    projection reads all its weights for each call, so one call per batch, not one per row). False (nothing
    written) when the model gives no usable hidden states."""
    import torch

    spans = []  # (row, first read position, end)
    for r, groups in enumerate(chunk):
        for group in groups:
            start = len(group.prefix) - 1
            spans.append((r, start, start + max(len(s) for s in group.suffixes) + 1))
    width = max(len(k) for k in keys)
    hidden = scorer._forward_hidden([list(k) for k in keys], keep=read_index(spans, width, scorer.device))
    if hidden is None:
        return False
    with torch.no_grad():
        picked = torch.cat([hidden[r, start:end] for r, start, end in spans])
        logprobs = torch.nn.functional.log_softmax(scorer.model.get_output_embeddings()(picked), dim=-1)
    at = 0
    for (_, start, end), group in zip(spans, (g for groups in chunk for g in groups), strict=True):
        for suffix, idx in group.suffixes.items():
            for i in idx:
                out[i] = continuation_score(logprobs[at : at + len(suffix) + 1], pairs[i][1], scorer.device)
        at += end - start
    return True


def _suffix_forward(
    scorer: Any, kept: Any, prefixes: list[int], width: int, rows: list[tuple[int, tuple[int, ...]]]
) -> Any:
    """The last hidden states of the choice rows ``(prefix row, suffix)``, each on its own prefix's cache:
    the cache rows picked per choice, the prefix batch's padding masked out, positions counted from each
    prefix's own end."""
    import torch

    cache = copy.deepcopy(kept)
    cache.batch_select_indices(torch.tensor([b for b, _ in rows], dtype=torch.long, device=scorer.device))
    suffix_width = max(len(r) for _, r in rows)
    mask = torch.zeros((len(rows), width + suffix_width), dtype=torch.long, device=scorer.device)
    positions = torch.zeros((len(rows), suffix_width), dtype=torch.long, device=scorer.device)
    for k, (b, _) in enumerate(rows):
        mask[k, : prefixes[b]] = 1
        mask[k, width:] = 1  # right-padded choices: causal, so a choice's pads are never attended
        positions[k] = torch.arange(prefixes[b], prefixes[b] + suffix_width)
    spans = [(k, 0, len(r)) for k, (_, r) in enumerate(rows)]
    return scorer._forward_hidden_output(
        [list(r) for _, r in rows],
        keep=read_index(spans, suffix_width, scorer.device),
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        **{cache_kwarg(scorer.model): cache},
    )


def _score_cached(scorer: Any, groups: list[ContextGroup], pairs: Sequence[Any], out: list[Any]) -> bool:
    """Groups with several choices: their contexts in one right-padded forward with the KV cache kept, then
    all their choices on those caches (``batch_size`` rows a forward). False when the model gives no cache or
    takes none in (nothing written then)."""
    import torch

    prefixes = [len(g.prefix) for g in groups]
    width = max(prefixes)
    first = scorer._forward_hidden_output(
        [list(g.prefix) for g in groups],
        keep=read_index([(b, n - 1, n) for b, n in enumerate(prefixes)], width, scorer.device),
        use_cache=True,
    )
    kept = returned_cache(first)
    if kept is None or not hasattr(kept, "batch_select_indices"):
        return False
    parts = [first.hidden_states[-1][b, n - 1 : n] for b, n in enumerate(prefixes)]
    rows = sorted(((b, r) for b, g in enumerate(groups) for r in g.rows), key=lambda x: -len(x[1]))
    where: dict[tuple[int, tuple[int, ...]], int] = {}
    at = len(groups)
    for c in range(0, len(rows), scorer.batch_size):
        chunk = rows[c : c + scorer.batch_size]
        try:
            second = _suffix_forward(scorer, kept, prefixes, width, chunk)
        except TypeError:  # a forward that takes no cache, mask or positions in
            return False
        if second is None:
            return False
        for k, (b, r) in enumerate(chunk):
            parts.append(second.hidden_states[-1][k, : len(r)])
            where[(b, r)] = at
            at += len(r)
    with torch.no_grad():
        logprobs = torch.nn.functional.log_softmax(scorer.model.get_output_embeddings()(torch.cat(parts)), dim=-1)
    for b, group in enumerate(groups):
        for suffix, idx in group.suffixes.items():
            rows_read = [b] + (list(range(where[(b, suffix)], where[(b, suffix)] + len(suffix))) if suffix else [])
            for i in idx:
                out[i] = continuation_score(logprobs[rows_read], pairs[i][1], scorer.device)
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
    multi = [g for g in groups if len(g.rows) > 1]  # longest contexts first: little padding
    for at in range(0, len(multi), scorer.batch_size):
        batch = multi[at : at + scorer.batch_size]
        if not _score_cached(scorer, batch, pairs, out):
            _check_nothing_scored(out)
            return None
        if progress is not None:
            progress(sum(g.size for g in batch))
    by_input: dict[tuple[int, ...], list[ContextGroup]] = {}
    for g in groups:
        if len(g.rows) <= 1:
            by_input.setdefault(g.prefix + (g.rows[0] if g.rows else ()), []).append(g)
    for chunk in scorer._batches(sorted(by_input, key=lambda k: (-len(k), k))):
        if not _score_whole_chunk(scorer, chunk, [by_input[key] for key in chunk], pairs, out):
            _check_nothing_scored(out)
            return None
        if progress is not None:
            progress(sum(g.size for key in chunk for g in by_input[key]))
    return [x for x in out if x is not None]


def _check_nothing_scored(out: list[Any]) -> None:
    """Falling back is only right before anything was scored; the model changing its mind part-way is a bug."""
    if any(x is not None for x in out):
        raise RuntimeError("scoring: the model stopped giving hidden states part-way through")
