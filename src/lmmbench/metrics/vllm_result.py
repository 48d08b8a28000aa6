"""The benchmark part of a ``vllm bench serve --save-result`` JSON, computed from request records.

Keys and definitions follow vLLM's ``vllm/benchmarks/serve.py`` (``benchmark()`` /
``calculate_metrics()``): ``ttfts`` / ``itls`` / ``latencies`` / ``start_times`` / ``queue_times`` in seconds,
TPOT over requests with more than one output token, percentiles with linear interpolation (numpy's default),
std over the population, metric summaries in milliseconds as ``mean_<m>_ms``, ``median_<m>_ms``,
``std_<m>_ms``, ``p<q>_<m>_ms``. Two of vLLM's measurements are timing faults, measured here lmmbench's way
under vLLM's names (docs/perf.md, "Coming from vLLM"): ``itls`` are per token (a chunk carrying k tokens after a
gap d gives k gaps of d/k, where vLLM counts one gap of d), and TTFT / E2EL of an open-loop schedule run from
the request's scheduled time (vLLM: from the send, after the wait for a concurrency slot, hiding the queueing);
with every request due at once (``--request-rate inf``) they run from the slot, as a closed loop's do.
Where vLLM writes 0 for a metric with no sample, this writes null (truth contract).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lmmbench.core.request_records import RequestRecord
from lmmbench.metrics.perf_metrics import itl_ms
from lmmbench.metrics.stats import percentile, percentile_key

__all__ = ["DETAILED_KEYS", "vllm_benchmark_result"]

#: Per-request lists vLLM keeps only with --save-detailed.
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors",
                 "server_queue_times", "server_ttfts")

_S = 1e9


def _stats(values_s: Sequence[float], percentiles: Sequence[float]) -> dict[str, float | None]:
    vals = sorted(v * 1e3 for v in values_s)
    if not vals:
        return {"mean": None, "median": None, "std": None, **{percentile_key(q): None for q in percentiles}}
    mean = math.fsum(vals) / len(vals)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))
    return {"mean": mean, "median": percentile(vals, 50), "std": std,
            **{percentile_key(q): percentile(vals, q) for q in percentiles}}  # fmt: skip


def _peaks(ok: list[RequestRecord]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s (tokens per one-second bucket) and exact peak concurrency."""
    if not ok:
        return 0.0, 0
    t0 = min(r.sent_ns for r in ok)
    buckets: dict[int, int] = {}
    for r in ok:
        for t, k in zip(r.chunk_times_ns, r.chunk_tokens, strict=False):
            b = int((t - t0) / _S)
            buckets[b] = buckets.get(b, 0) + max(k, 1)
    events = sorted([(r.sent_ns, 1) for r in ok] + [(r.end_ns, -1) for r in ok])
    cur = peak = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return float(max(buckets.values(), default=0)), peak


def _good(ttft: float, tpot: float, e2el: float, goodput_ms: dict[str, float]) -> bool:
    limits = {"ttft": ttft, "tpot": tpot, "e2el": e2el}
    return all(limits[k] * 1e3 <= v for k, v in goodput_ms.items() if k in limits)


def vllm_benchmark_result(
    records: Sequence[RequestRecord],
    *,
    duration_s: float,
    percentiles: Sequence[float] = (99.0,),
    percentile_metrics: Sequence[str] = ("ttft", "tpot", "itl"),
    goodput_ms: dict[str, float] | None = None,
    detailed: bool = False,
    queue_metrics: bool = False,
    from_scheduled: bool = True,
) -> dict[str, Any]:
    """vLLM's result keys for the measured records (``goodput_ms`` keyed ttft / tpot / e2el); latencies from
    each request's scheduled time, or (``from_scheduled=False``, every request due at once) from its slot."""
    recs = [r for r in records if not r.warmup]
    ok = [r for r in recs if r.ok]
    refs = [(r.scheduled_ns if from_scheduled else r.slot_ns) or r.sent_ns for r in recs]
    ttfts = [(r.first_token_ns - t0) / _S if r.ok and r.first_token_ns else 0.0 for r, t0 in zip(recs, refs,
                                                                                                  strict=True)]
    # vLLM's request ends with its last token chunk (the usage chunk and [DONE] after it are not counted)
    lat = [((r.chunk_times_ns[-1] if r.chunk_times_ns else r.end_ns) - t0) / _S if r.ok else 0.0
           for r, t0 in zip(recs, refs, strict=True)]  # fmt: skip
    itls = [[x / 1e3 for x in itl_ms(r)] for r in recs]
    out_lens = [r.output_tokens if r.ok else 0 for r in recs]
    in_total = sum(r.input_tokens or r.prompt_tokens or 0 for r in ok)
    tpots: list[float] = []
    good = 0
    for i, r in enumerate(recs):
        if not r.ok:
            continue
        tpot = (lat[i] - ttfts[i]) / (out_lens[i] - 1) if out_lens[i] > 1 else 0.0
        if out_lens[i] > 1:
            tpots.append(tpot)
        good += bool(goodput_ms) and _good(ttfts[i], tpot, lat[i], goodput_ms or {})
    dur = duration_s if duration_s > 0 else math.nan
    peak_tokens, peak_conc = _peaks(ok)
    res: dict[str, Any] = {
        "duration": duration_s, "completed": len(ok), "failed": len(recs) - len(ok),
        "total_input_tokens": in_total, "total_output_tokens": sum(out_lens),
        "request_throughput": len(ok) / dur, "request_goodput": good / dur if goodput_ms else None,
        "output_throughput": sum(out_lens) / dur, "total_token_throughput": (in_total + sum(out_lens)) / dur,
        "input_lens": [r.input_tokens if r.input_tokens is not None else r.prompt_tokens for r in recs],
        "output_lens": out_lens, "ttfts": ttfts, "itls": itls, "latencies": lat,
        "start_times": [r.sent_ns / _S for r in recs],
        "queue_times": [max(r.slot_ns - r.scheduled_ns, 0) / _S if r.slot_ns else 0.0 for r in recs],
        "generated_texts": [r.output_text for r in recs], "errors": [r.error_message for r in recs],
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_conc, "rtfx": 0.0,
        # the server's own queue time and TTFT, which vLLM reads from a final chunk's "metrics": not read here
        "server_queue_times": [None] * len(recs), "server_ttfts": [None] * len(recs),
    }  # fmt: skip
    ok_idx = [i for i, r in enumerate(recs) if r.ok]
    series = {
        "ttft": [ttfts[i] for i in ok_idx], "tpot": tpots,
        "itl": [x for i in ok_idx for x in itls[i]], "e2el": [lat[i] for i in ok_idx],
    }  # fmt: skip
    if queue_metrics:  # with --max-concurrency, as vLLM
        series["client_queue_time"] = [res["queue_times"][i] for i in ok_idx]
        if from_scheduled:  # a finite rate: end-to-end from the scheduled time, the queue included
            series["e2el_including_client_queue"] = [lat[i] if refs[i] == recs[i].scheduled_ns else
                                                     lat[i] + res["queue_times"][i] for i in ok_idx]  # fmt: skip
    for name, values in series.items():
        if name not in percentile_metrics:
            continue
        for stat, v in _stats(values, percentiles).items():
            res[f"{stat}_{name}_ms"] = v
    if not detailed:
        for key in DETAILED_KEYS:
            res.pop(key, None)
    return res
