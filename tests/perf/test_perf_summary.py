"""The typed perf summary: attributes, units, one ``to_dict`` in the result files' layout, ``from_dict`` back."""

from __future__ import annotations

import json
import math

import pytest

from lmmbench.metrics.perf_metrics import summarize_records
from lmmbench.metrics.perf_summary import Distribution, PerfSummary
from lmmbench.reports.perf_report import bytemlperf_entry
from lmmbench.testing import make_record

# The layout report.json's "lmmbench" entry has had since perf runs were first written (docs/perf.md's keys)
_LAYOUT = ["requests", "ok", "errors", "not_sent", "errors_by_kind", "duration_s", "send_rate_rps", "qps",
           "input_token_throughput", "output_token_throughput", "total_token_throughput", "goodput_qps", "slo",
           "slo_attainment", "token_sources", "new_connections", "metrics"]  # fmt: skip


def _summary() -> PerfSummary:
    recs = [make_record(request_id=i, ttft_ms=10 + i, scheduled_ms=i * 10) for i in range(10)]
    recs.append(make_record(request_id=10, error_kind="timeout"))
    return summarize_records(recs, slo={"ttft_ms": 14.5}, percentiles=(50.0, 99.9))


def test_summary_reads_by_attribute_with_units() -> None:
    s = _summary()
    assert (s.requests, s.ok, s.errors) == (11, 10, 1) and s.error_rate == pytest.approx(1 / 11)
    ttft = s.metrics["ttft_ms"]
    assert ttft.unit == "ms" and s.metrics["output_tokens"].unit == "tokens"
    assert ttft.count == 10 and ttft.min == pytest.approx(10.0) and ttft.max == pytest.approx(19.0)
    assert ttft.p50 == pytest.approx(14.5) and ttft.percentiles["p99.9"] == pytest.approx(18.991)
    assert s.goodput_qps == pytest.approx(5 / s.duration_s)


def test_to_dict_is_the_written_layout_and_from_dict_reads_it_back() -> None:
    s = _summary()
    d = s.to_dict()
    assert list(d) == _LAYOUT
    assert list(d["metrics"]["ttft_ms"]) == ["count", "mean", "std", "min", "p50", "p90", "p99", "p99.9", "max"]
    assert bytemlperf_entry({"concurrency": 1}, s)["lmmbench"]["metrics"]["ttft_ms"]["p90"] == pytest.approx(
        d["metrics"]["ttft_ms"]["p90"])  # fmt: skip
    back = PerfSummary.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d and back.metrics["e2e_ms"].unit == "ms"
    assert s["metrics"]["ttft_ms"]["p99"] == s.metrics["ttft_ms"].p99  # the documented mapping reading


def test_from_dict_reads_an_entry_missing_later_keys() -> None:
    old = {"requests": 4, "ok": 4, "errors": 0, "metrics": {"ttft_ms": {"count": 4.0, "mean": 2.0, "std": 0.5,
           "min": 1.0, "p50": 2.0, "p90": 2.5, "p99": 3.0, "max": 3.0}}}  # fmt: skip
    s = PerfSummary.from_dict(old)
    assert s.ok == 4 and s.not_sent is None and s.new_connections is None and math.isnan(s.goodput_qps)
    assert s.metrics["ttft_ms"].p90 == 2.5 and isinstance(s.metrics["ttft_ms"], Distribution)
