"""Each distinct context runs once and its answer choices run on its KV cache: the same log-likelihoods and
greedy flags as running every input whole (within float32 rounding), with fewer tokens through the model."""

from __future__ import annotations

from typing import Any

import pytest

from float_tolerance import f32_close, worst_f32_gap
from lmmbench.backends.context_sharing import group_by_context
from lmmbench.backends.scoring import InProcessScorer, LLRequest

QUESTIONS = [
    ("Question: What is the capital of France?\nAnswer:", [" Paris", " London is big", " Berlin, in Germany", " Rome"]),
    ("The fox jumps over the dog. Then it", [" ran away quickly.", " slept.", " ate the dog whole and left", " x"]),
    ("Q: 2+2=?\nA:", [" A", " B", " C", " D"]),  # tiny-llm: a space token, then the letter: one shared row
    ("A context with a single choice", [" and its only continuation"]),
]


def _requests() -> list[LLRequest]:
    reqs = [LLRequest(q, c) for q, cs in QUESTIONS for c in cs]
    return [*reqs, reqs[1], reqs[9]]  # duplicates answer from the same rows


class _TokenCounter:
    """Counts the input tokens of every forward of the model (a forward pre-hook)."""

    def __init__(self, model: Any) -> None:
        self.tokens = 0
        self.forwards = 0
        self.handle = model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, _module: Any, args: Any, kwargs: Any) -> None:
        ids = args[0] if args else kwargs["input_ids"]
        self.tokens += int(ids.numel())
        self.forwards += 1


def _score(tiny_llm: Any, **kwargs: Any) -> tuple[list[tuple[float, bool]], _TokenCounter]:
    counter = _TokenCounter(tiny_llm.model)
    try:
        return InProcessScorer(tiny_llm, **kwargs).loglikelihood(_requests()), counter
    finally:
        counter.handle.remove()


@pytest.mark.parametrize("batch_size", [16, 2])  # 2: a question's four choices take two forwards on copied caches
def test_shared_contexts_give_the_numbers_of_whole_inputs(tiny_llm: Any, batch_size: int) -> None:
    whole, whole_count = _score(tiny_llm, batch_size=1, share_context=False)
    shared, shared_count = _score(tiny_llm, batch_size=batch_size, share_context=True, pad_batches=True)
    assert len(shared) == len(whole) == len(_requests())
    for (a, ga), (b, gb) in zip(shared, whole, strict=True):
        # batch 1 whole against batches of 16 or 2 on copied caches: other kernels' blocking, so float32's
        # spread (factor 1: the batch-size gap measured on an AVX2 EPYC is 0.07 of it)
        assert f32_close(a, b, factor=1.0), (a, b)
        assert ga == gb  # an argmax: flips only on a tie within the spread
    # a request asked twice is scored once and its number copied: exact by construction
    assert shared[1] == shared[-2] and shared[9] == shared[-1]
    # the two multi-token questions run their context once: fewer tokens than every input whole
    assert shared_count.tokens < whole_count.tokens


def test_only_questions_with_several_multi_token_choices_use_the_cache(tiny_llm: Any) -> None:
    s = InProcessScorer(tiny_llm, pad_batches=True)
    pairs = [s.encode_pair(r.context, r.continuation) for r in _requests()]
    groups = group_by_context(pairs, s.max_length)
    assert groups is not None
    by_size = sorted((len(g.rows), g.size) for g in groups)
    # the single choice (1 row); the letters (their one shared row: the space token; 4 requests and a
    # duplicate); the two four-choice questions (4 distinct rows each; one of them asked twice)
    assert by_size == [(1, 1), (1, 5), (4, 4), (4, 5)]
    one_token = group_by_context([([5, 6, 7], [t]) for t in (8, 9, 10, 11)], s.max_length)
    assert one_token is not None and [(len(g.rows), g.size) for g in one_token] == [(0, 4)]
    s.loglikelihood(_requests())  # the first call also checks, once, that the last MLP may skip positions
    counter = _TokenCounter(tiny_llm.model)
    try:
        s.loglikelihood(_requests())
    finally:
        counter.handle.remove()
    # the two cached questions: one forward of both contexts (right-padded), one of their eight choices on the
    # contexts' caches; then one padded batch of the rest
    assert counter.forwards == 3
    small = InProcessScorer(tiny_llm, pad_batches=True, batch_size=3)
    small.loglikelihood(_requests())
    counter = _TokenCounter(tiny_llm.model)
    try:
        small.loglikelihood(_requests())
    finally:
        counter.handle.remove()
    # batch size 3: the two contexts in one forward, the eight choices in three, the other two inputs in one
    assert counter.forwards == 5


def test_an_input_cut_to_the_context_length_is_scored_whole(tiny_llm: Any) -> None:
    s = InProcessScorer(tiny_llm, max_length=8)
    req = [LLRequest("one two three four five six seven eight nine ten", " eleven twelve"),
           LLRequest("one two three four five six seven eight nine ten", " twelve")]  # fmt: skip
    shared = s.loglikelihood(req)
    whole = InProcessScorer(tiny_llm, max_length=8, share_context=False).loglikelihood(req)
    # cached context against the whole input: other shapes, so float32's spread, not rounding (a value next to a
    # rounding boundary would round apart); factor 1 as above
    gap = worst_f32_gap([x[0] for x in shared], [x[0] for x in whole])
    assert gap <= 1.0, f"{gap:.3f} x F32_SPREAD_REL apart"
