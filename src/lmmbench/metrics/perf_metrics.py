"""Serving metrics as pure functions of request records.

Latencies are measured from the scheduled time (``*_ms``: a late client is charged to the
server, as MLPerf LoadGen does, so coordinated omission cannot hide queueing) and from the send
time (``*_send_ms``). Client lateness = sent − slot (the slot is the scheduled time unless a
concurrency cap made the request wait; that wait is ``queue_ms``).

ITL is per token: a chunk carrying k tokens after a gap d adds k intervals of d/k, so it stays
right when a server coalesces tokens; the first chunk's extra tokens add no interval (their gaps
are unknown). Inter-chunk latency is reported separately. TPOT = (e2e − ttft) / (output_tokens − 1).

Server-side metrics: when a response carries the ``metrics`` object of lmmbench's server or measuring proxy,
its timings are kept beside the client's as ``server_<name>`` (null where the server did not measure one), and
``client_minus_server_ttft_ms`` / ``client_minus_server_e2e_ms`` are the client's send-based TTFT / latency
minus the server's: the time spent outside the measuring server (network, HTTP framing, queueing in front of
it). The TTFT difference needs a streamed answer (a whole answer's client TTFT is its latency).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from lmmbench.core.request_records import RequestRecord
from lmmbench.metrics.perf_summary import Distribution, PerfSummary, metric_unit

__all__ = [
    "LATENCY_METRICS",
    "SERVER_METRICS",
    "PerfSummary",
    "inter_chunk_ms",
    "itl_ms",
    "meets_slo",
    "request_values",
    "summarize_records",
]

_MS = 1e6

#: Per-request latency metrics summarized in every report (milliseconds).
LATENCY_METRICS = (
    "ttft_ms", "ttft_send_ms", "ttfvt_ms", "tpot_ms", "e2e_ms", "e2e_send_ms", "lateness_ms", "queue_ms",
)  # fmt: skip


#: The server's ``metrics`` fields kept per request, as ``server_<name>``.
#: ``process_peak_memory_bytes``: the server process's own memory (lmmbench's server); ``device_peak_memory_bytes``:
#: the whole device's used memory, every process on it (the measuring proxy, through NVML) — two quantities
SERVER_METRICS = ("queue_ms", "ttft_ms", "tpot_ms", "e2e_ms", "process_peak_memory_bytes", "device_peak_memory_bytes")
#: Per-request server-side metrics summarized when a run's responses carry them.
SERVER_SERIES = ("server_ttft_ms", "server_tpot_ms", "server_e2e_ms", "server_process_peak_memory_bytes",
                 "server_device_peak_memory_bytes",
                 "client_minus_server_ttft_ms", "client_minus_server_e2e_ms")  # fmt: skip


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def server_values(rec: RequestRecord, ttft_send: float | None, e2e_send: float | None) -> dict[str, Any]:
    """The server's own metrics of one record (``server_*``) and the client − server differences (None where
    the response carried none)."""
    got = rec.server_metrics or {}
    out: dict[str, Any] = {f"server_{k}": _number(got.get(k)) for k in SERVER_METRICS}
    streamed = rec.end_ns > rec.first_token_ns > 0
    s_ttft, s_e2e = out["server_ttft_ms"], out["server_e2e_ms"]
    out["client_minus_server_ttft_ms"] = ttft_send - s_ttft if streamed and None not in (ttft_send, s_ttft) else None
    out["client_minus_server_e2e_ms"] = e2e_send - s_e2e if None not in (e2e_send, s_e2e) else None
    return out


def itl_ms(rec: RequestRecord) -> list[float]:
    """Per-token inter-token latencies of one record."""
    out: list[float] = []
    prev = 0
    for t, k in zip(rec.chunk_times_ns, rec.chunk_tokens, strict=False):
        if k <= 0:
            continue
        if prev:
            gap = (t - prev) / _MS / k
            out.extend([gap] * k)
        prev = t
    return out


def inter_chunk_ms(rec: RequestRecord) -> list[float]:
    """Gaps between consecutive chunks that carried generated text."""
    ts = rec.chunk_times_ns
    return [(b - a) / _MS for a, b in itertools.pairwise(ts)]


def request_values(rec: RequestRecord) -> dict[str, Any]:
    """The per-request numbers of one record (None where they do not apply)."""

    def ms(a: int, b: int) -> float | None:
        return (a - b) / _MS if a and b else None

    ttft = ms(rec.first_token_ns, rec.scheduled_ns)
    e2e = ms(rec.end_ns, rec.scheduled_ns)
    tpot = None  # none when the first token came with the end (a whole, non-streamed response): no decode was seen
    if ttft is not None and e2e is not None and rec.output_tokens > 1 and rec.end_ns > rec.first_token_ns:
        tpot = (e2e - ttft) / (rec.output_tokens - 1)
    itl = itl_ms(rec)
    ttft_send, e2e_send = ms(rec.first_token_ns, rec.sent_ns), ms(rec.end_ns, rec.sent_ns)
    return {
        "request_id": rec.request_id,
        "worker": rec.worker,
        "warmup": rec.warmup,
        "ok": rec.ok,
        "status": rec.status,
        "error_kind": rec.error_kind,
        "error_message": rec.error_message,
        "ttft_ms": ttft,
        "ttft_send_ms": ttft_send,
        "ttfvt_ms": ms(rec.first_content_ns, rec.scheduled_ns),
        "tpot_ms": tpot,
        "itl_mean_ms": (sum(itl) / len(itl)) if itl else None,
        "e2e_ms": e2e,
        "e2e_send_ms": e2e_send,
        "lateness_ms": ms(rec.sent_ns, rec.slot_ns or rec.scheduled_ns),
        "queue_ms": ms(rec.slot_ns, rec.scheduled_ns) if rec.slot_ns else 0.0,
        "input_tokens": rec.input_tokens,
        "prompt_tokens": rec.prompt_tokens,
        "output_tokens": rec.output_tokens,
        "reasoning_tokens": rec.reasoning_tokens,
        "chunks": len(rec.chunk_times_ns),
        "token_source": rec.token_source,
        "finish_reason": rec.finish_reason,
        "saw_done": rec.saw_done,
        "new_connection": rec.new_connection,
        "scheduled_ns": rec.scheduled_ns,
        "sent_ns": rec.sent_ns,
        "first_byte_ns": rec.first_byte_ns,
        "first_token_ns": rec.first_token_ns,
        "first_content_ns": rec.first_content_ns,
        "end_ns": rec.end_ns,
        **server_values(rec, ttft_send, e2e_send),
    }


def meets_slo(values: dict[str, Any], slo: dict[str, float]) -> bool:
    """True when a successful request stays within every SLO limit."""
    if not values["ok"]:
        return False
    for key, limit in slo.items():
        v = values["itl_mean_ms"] if key == "itl_ms" else values.get(key)
        if v is not None and v > limit:
            return False
    return True


def _span_s(starts: Sequence[int], ends: Sequence[int]) -> float:
    if not starts or not ends:
        return math.nan
    return max(max(ends) - min(starts), 1) / 1e9


def summarize_records(
    records: Iterable[RequestRecord],
    slo: dict[str, float] | None = None,
    not_sent: int = 0,
    percentiles: Sequence[float] = (50.0, 90.0, 95.0, 99.0),
) -> PerfSummary:
    """Aggregate metrics of the measured (non-warmup) records (``percentiles`` in every metric's stats)."""
    pcts = tuple(percentiles)
    recs = [r for r in records if not r.warmup]
    vals = [request_values(r) for r in recs]
    ok = [v for v in vals if v["ok"]]
    ok_recs = [r for r in recs if r.ok]
    starts = [r.scheduled_ns for r in recs if r.scheduled_ns]
    ends = [r.end_ns for r in recs if r.end_ns]
    duration_s = _span_s(starts, ends)
    sent = sorted(r.sent_ns for r in recs if r.sent_ns)
    send_rate = (len(sent) - 1) / ((sent[-1] - sent[0]) / 1e9) if len(sent) > 1 and sent[-1] > sent[0] else math.nan
    out_tokens = sum(v["output_tokens"] for v in ok)
    in_tokens = sum((v["prompt_tokens"] if v["prompt_tokens"] is not None else v["input_tokens"] or 0) for v in ok)
    series: dict[str, list[float]] = {}
    for name in LATENCY_METRICS:
        source = vals if name in ("lateness_ms", "queue_ms") else ok
        series[name] = [v[name] for v in source if v[name] is not None]
    series["itl_ms"] = [x for r in ok_recs for x in itl_ms(r)]
    series["inter_chunk_ms"] = [x for r in ok_recs for x in inter_chunk_ms(r)]
    series["output_tokens"] = [v["output_tokens"] for v in ok]
    series["input_tokens"] = [v["input_tokens"] for v in ok if v["input_tokens"] is not None]
    # ByteMLPerf's per-token latency: end-to-end time divided by output tokens, first token included
    series["per_token_latency_ms"] = [
        v["e2e_ms"] / v["output_tokens"] for v in ok if v["e2e_ms"] is not None and v["output_tokens"]
    ]
    for name in SERVER_SERIES:  # only when responses carried server-side metrics
        if xs := [v[name] for v in ok if v[name] is not None]:
            series[name] = xs
    metrics = {name: Distribution.of(xs, metric_unit(name), pcts) for name, xs in series.items()}
    slo = slo or {}
    good = sum(1 for v in vals if meets_slo(v, slo)) if slo else len(ok)
    errors = Counter(v["error_kind"] for v in vals if not v["ok"])
    return PerfSummary(
        requests=len(recs),
        ok=len(ok),
        errors=len(recs) - len(ok),
        not_sent=not_sent,
        errors_by_kind=dict(sorted(errors.items())),
        duration_s=duration_s,
        send_rate_rps=send_rate,
        qps=len(ok) / duration_s if duration_s and not math.isnan(duration_s) else math.nan,
        input_token_throughput=in_tokens / duration_s if duration_s else math.nan,
        output_token_throughput=out_tokens / duration_s if duration_s else math.nan,
        total_token_throughput=(in_tokens + out_tokens) / duration_s if duration_s else math.nan,
        goodput_qps=good / duration_s if duration_s else math.nan,
        slo=slo,
        slo_attainment=good / len(recs) if recs else math.nan,
        token_sources=dict(Counter(v["token_source"] for v in ok)),
        new_connections=sum(1 for r in recs if r.new_connection),
        metrics=metrics,
    )
