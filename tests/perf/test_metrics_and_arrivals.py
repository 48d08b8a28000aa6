"""Metrics as pure functions of records (record builders), statistics, arrival processes."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from lmmbench.loadgen.arrivals import arrival_offsets_ns
from lmmbench.loadgen.search import search_max_load
from lmmbench.metrics.perf_metrics import inter_chunk_ms, itl_ms, request_values, summarize_records
from lmmbench.metrics.stats import percentile, summarize
from lmmbench.testing import make_record


def test_itl_is_per_token_when_chunks_carry_several_tokens() -> None:
    # first chunk 4 tokens at 20 ms, then chunks of 4 tokens every 20 ms: 5 ms per token
    rec = make_record(ttft_ms=20, chunk_gaps_ms=[20, 20, 20], chunk_tokens=[4, 4, 4, 4])
    assert itl_ms(rec) == pytest.approx([5.0] * 12)
    assert inter_chunk_ms(rec) == pytest.approx([20.0] * 3)
    v = request_values(rec)
    assert v["ttft_ms"] == pytest.approx(20.0)
    assert v["tpot_ms"] == pytest.approx(60.0 / 15)  # (e2e - ttft) / (16 - 1)


def test_latency_from_scheduled_and_from_send_and_lateness() -> None:
    rec = make_record(ttft_ms=30, sent_ms=10)  # the client sent 10 ms late
    v = request_values(rec)
    assert v["ttft_ms"] == pytest.approx(30.0)
    assert v["ttft_send_ms"] == pytest.approx(20.0)
    assert v["lateness_ms"] == pytest.approx(10.0)


def test_summary_counts_errors_excludes_warmup_and_applies_slos() -> None:
    recs = [make_record(request_id=i, ttft_ms=10 + i, scheduled_ms=i * 10) for i in range(10)]
    recs.append(make_record(request_id=10, error_kind="http_5xx"))
    recs.append(make_record(request_id=11, error_kind="timeout"))
    recs.append(make_record(request_id=12, ttft_ms=999, warmup=True))
    s = summarize_records(recs, slo={"ttft_ms": 14.5})
    assert s["requests"] == 12 and s["ok"] == 10 and s["errors"] == 2
    assert s["errors_by_kind"] == {"http_5xx": 1, "timeout": 1}
    assert s["metrics"]["ttft_ms"]["max"] == pytest.approx(19.0)  # warm-up excluded
    assert s["slo_attainment"] == pytest.approx(5 / 12)  # ttft 10..14 pass; errors fail
    assert s["goodput_qps"] == pytest.approx(5 / s["duration_s"])


def test_percentile_matches_linear_interpolation() -> None:
    vals = sorted(random.Random(1).random() for _ in range(101))
    assert percentile(vals, 50) == vals[50]
    assert percentile([1.0, 2.0], 25) == pytest.approx(1.25)
    assert math.isnan(percentile([], 50))
    s = summarize([1, 2, 3, 4])
    assert s["mean"] == 2.5 and s["min"] == 1 and s["max"] == 4 and s["count"] == 4


def test_arrivals_are_absolute_seeded_and_have_the_right_rate() -> None:
    const = arrival_offsets_ns("constant", 100, count=5)
    assert const == [0, 10_000_000, 20_000_000, 30_000_000, 40_000_000]
    a = arrival_offsets_ns("poisson", 500, count=20000, seed=3)
    assert a == arrival_offsets_ns("poisson", 500, count=20000, seed=3)
    assert a != arrival_offsets_ns("poisson", 500, count=20000, seed=4)
    rate = (len(a) - 1) / (a[-1] / 1e9)
    assert rate == pytest.approx(500, rel=0.03)
    g = arrival_offsets_ns("gamma", 500, count=20000, seed=3, burstiness=0.25)
    assert (len(g) - 1) / (g[-1] / 1e9) == pytest.approx(500, rel=0.06)
    gaps = [y - x for x, y in itertools.pairwise(g)]
    pgaps = [y - x for x, y in itertools.pairwise(a)]
    assert summarize(gaps)["std"] > 1.5 * summarize(pgaps)["std"]  # burstier
    d = arrival_offsets_ns("constant", 10, duration_s=1.0)
    assert len(d) == 10 and d[-1] < 1e9


def test_search_bisects_to_the_threshold() -> None:
    res = search_max_load(lambda x: x <= 337, 10, 1000, 10)
    assert res.best is not None and res.lowest_failing is not None
    assert res.best <= 337 < res.lowest_failing
    assert res.gap is not None and res.gap < 0.01
    assert search_max_load(lambda x: False, 1, 10, 3).best is None
    conc = search_max_load(lambda x: x <= 6, 1, 64, 10, integer=True)
    assert conc.best == 6 and conc.lowest_failing == 7
