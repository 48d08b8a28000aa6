"""The span timeline and the fold into stage fields, against injected ground truth."""

from __future__ import annotations

from typing import Any

import pytest

from lmmbench.profiling.stages import OTHERS_PARTS, PREFILL_PARTS, stage_breakdown
from lmmbench.profiling.timeline import ResolvedSpan, Timeline


def test_exclusive_times_partition_the_root_exactly() -> None:
    tl = Timeline()
    root = tl.open("ttft")
    a = tl.open("generate")
    b = tl.open("visual")
    tl.close(b)
    c = tl.open("forward")
    d = tl.open("llm")
    tl.close(d)
    tl.close(c)
    tl.close(a)
    tl.close(root)
    spans = tl.resolve()
    assert [s.depth for s in spans] == [0, 1, 2, 2, 3]
    assert sum(s.exclusive_ms for s in spans) == pytest.approx(spans[0].duration_ms, abs=1e-9)
    assert all(s.exclusive_ms >= 0 for s in spans)


def test_closing_a_parent_closes_children_left_open() -> None:
    tl = Timeline()
    root = tl.open("ttft")
    tl.open("forward")  # e.g. a forward that raised: its post-hook never ran
    tl.close(root)
    spans = tl.resolve()
    assert spans[1].end_ms == spans[0].end_ms


class _FakeEvent:
    """A CUDA event stand-in: records are fine anywhere, elapsed_time only after a sync."""

    clock = 0.0
    synced = False

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t = -1.0

    def record(self) -> None:
        _FakeEvent.clock += 2.5
        self.t = _FakeEvent.clock

    def elapsed_time(self, other: Any) -> float:
        assert _FakeEvent.synced, "elapsed_time before the synchronisation"
        return float(other.t - self.t)


def test_mocked_gpu_timeline_uses_events_and_synchronises_once() -> None:
    syncs: list[int] = []
    tl = Timeline(use_cuda=False)
    tl.use_cuda, tl.timer_kind = True, "cuda_event"
    tl._event_cls = _FakeEvent
    tl._sync = lambda: (syncs.append(1), setattr(_FakeEvent, "synced", True))
    root = tl.open("ttft")
    v = tl.open("visual")
    tl.close(v)
    tl.close(root)
    assert syncs == []  # nothing synchronised in the hot path
    spans = tl.resolve()
    assert syncs == [1]
    assert spans[0].duration_ms == pytest.approx(7.5) and spans[1].duration_ms == pytest.approx(2.5)


def _span(cat: str, start: float, end: float, excl: float, depth: int) -> ResolvedSpan:
    return ResolvedSpan(cat, start, end, excl, depth)


def test_stage_breakdown_invariants_on_injected_spans() -> None:
    spans = [
        _span("ttft", 0, 100, 1.0, 0),
        _span("input_transfer", 0, 2, 2.0, 1),
        _span("generate", 2, 100, 3.0, 1),
        _span("encoder_dispatch", 5, 35, 1.0, 2),
        _span("visual", 6, 35, 29.0, 3),
        _span("forward", 40, 90, 1.0, 2),
        _span("wrapper", 40, 85, 4.0, 3),
        _span("audio", 41, 51, 10.0, 4),
        _span("llm", 55, 85, 30.0, 4),
        _span("lm_head", 85, 90, 5.0, 3),
        _span("first_token", 90, 100, 10.0, 2),
        _span("cache_setup", 36, 40, 4.0, 2),
    ]
    spans.insert(4, _span("position_ids", 3, 5, 2.0, 2))  # the rope index, before the forward (transformers 5.x)
    spans[2] = _span("generate", 2, 100, 1.0, 1)
    f = stage_breakdown(spans)
    assert f["ttft_ms"] == 100
    assert (f["visual_encoder_ms"], f["audio_encoder_ms"], f["llm_prefill_ms"]) == (29, 10, 30)
    # the study's prefill: merge 4 + rope index 2 + LLM forward 30 + lm_head 5 + the forward's own glue 1
    assert (f["prefill_merge_ms"], f["prefill_rope_index_ms"], f["prefill_lm_head_ms"]) == (4, 2, 5)
    assert f["prefill_forward_glue_ms"] == 1 and f["prefill_ms"] == 42
    assert f["prefill_ms"] - f["llm_prefill_ms"] == 4 + 2 + 5 + 1
    assert f["prefill_outside_forward_ms"] == 2  # what a timer on the forward alone misses
    assert f["visual_encoder_ms"] + f["audio_encoder_ms"] + f["prefill_ms"] + f["others_ms"] == f["ttft_ms"]
    assert sum(f[p] for p in OTHERS_PARTS) == pytest.approx(f["others_ms"])
    assert sum(f[p] for p in PREFILL_PARTS) == pytest.approx(f["prefill_ms"])
    assert f["others_ms"] == 1 + 2 + 1 + 1 + 4 + 10  # ttft root, transfer, generate, dispatch, cache, first token
    assert f["others_unattributed_ms"] == 2
    assert f["unattributed_pct"] == pytest.approx(2.0)
    folded = stage_breakdown(spans, merge_in_forward=True)  # 4.x layout: the forward's own code is the merge
    assert folded["prefill_merge_ms"] == 5 and folded["prefill_forward_glue_ms"] == 0 and folded["prefill_ms"] == 42
