"""The result of ``python -m sglang.bench_serving`` (SGLang 0.5.23's keys), computed from request records.

Keys follow SGLang's ``sglang/benchmark/serving.py`` (``calculate_metrics`` and the ``result`` dict of
``benchmark``) and ``goodput.py``: latencies in seconds in the per-request lists, summaries in milliseconds as
``mean_/median_/std_/p90_/p95_/p99_<metric>_ms`` (population std, linear percentiles), ``concurrency`` = the sum
of request latencies over the duration, the peaks over one-second buckets. The values are lmmbench's measurement,
not SGLang's (docs/perf.md, "Coming from SGLang"): TTFT and latency from each request's scheduled time (SGLang
starts its clock after a concurrency slot is free), ITL per token (SGLang's OpenAI backends take one gap per
chunk), and null where there is no sample (SGLang writes 0). A response that was not streamed (``--disable-stream``)
shows its first token when it ends: its TTFT is its E2E latency, as in SGLang, and it has no TPOT or ITL (SGLang
writes a TPOT of 0 for it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lmmbench.core.request_records import RequestRecord
from lmmbench.metrics.perf_metrics import itl_ms
from lmmbench.metrics.stats import percentile

__all__ = ["DETAIL_KEYS", "sglang_benchmark_result", "sglang_cache_report"]

#: per-request lists SGLang writes only with --output-details
DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
_S = 1e9


def _stats(name: str, values_s: Sequence[float], with_max: bool = False) -> dict[str, float | None]:
    vals = sorted(v * 1e3 for v in values_s)
    keys = ("mean", "median", "std", "p90", "p95", "p99") + (("max",) if with_max else ())
    if not vals:
        return {f"{k}_{name}_ms": None for k in keys}
    mean = math.fsum(vals) / len(vals)
    out: dict[str, float | None] = {f"mean_{name}_ms": mean, f"median_{name}_ms": percentile(vals, 50),
           f"std_{name}_ms": math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals)),
           **{f"p{q}_{name}_ms": percentile(vals, q) for q in (90, 95, 99)}}  # fmt: skip
    if with_max:
        out[f"max_{name}_ms"] = vals[-1]
    return out


def _peaks(ok: list[RequestRecord]) -> tuple[float | None, int | None]:
    """SGLang's max_output_tokens_per_s and max_concurrent_requests: one-second buckets from the first start."""
    if not ok:
        return None, None  # no request finished: no peak was measured
    t0 = min(r.scheduled_ns or r.sent_ns for r in ok)
    tokens: dict[int, int] = {}
    active: dict[int, int] = {}
    for r in ok:
        for t, k in zip(r.chunk_times_ns, r.chunk_tokens, strict=False):
            b = int((t - t0) / _S)
            tokens[b] = tokens.get(b, 0) + k
        for b in range(int(((r.scheduled_ns or r.sent_ns) - t0) / _S), int((r.end_ns - t0) / _S) + 1):
            active[b] = active.get(b, 0) + 1
    return float(max(tokens.values(), default=0)), max(active.values(), default=0)


def _goodput(rows: list[tuple[float, float, float] | None], slos: dict[str, float], dur: float) -> dict[str, Any]:
    """SGLang's GoodputMetrics: requests meeting every SLO per second, and attainment over all requests sent."""
    met = dict.fromkeys(slos, 0)
    good = 0
    for row in rows:
        if row is None:
            continue
        ttft, tpot, e2el = row
        observed = {"ttft": ttft * 1e3, "tpot": tpot * 1e3, "e2el": e2el * 1e3}
        ok = [k for k, v in slos.items() if observed[k] <= v]
        for k in ok:
            met[k] += 1
        good += len(ok) == len(slos)
    n = max(len(rows), 1)
    return {"goodput_slos_ms": slos, "request_goodput": good / dur, "slo_attainment": good / n,
            "slo_attainment_by_metric": {k: v / n for k, v in met.items()}}  # fmt: skip


def sglang_cache_report(records: Sequence[RequestRecord]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """SGLang's ``--cache-report``: prompt and cached tokens over the successful requests (the server's prompt
    count first, as SGLang), and the per-request lists; totals are null when no response reported cached tokens
    (SGLang writes 0)."""
    ok = [r for r in records if not r.warmup and r.ok]
    reported = [r for r in ok if r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens or r.input_tokens or 0 for r in ok)
    cached = sum(r.cached_tokens or 0 for r in reported) if reported else None
    tiers = [r.cached_tokens_details for r in reported if r.cached_tokens_details]

    def tier(name: str) -> int:
        return sum(int(d.get(name) or 0) for d in tiers)

    storage = tier("storage")
    backend = next((d.get("storage_backend") for d in tiers if d.get("storage")), None)
    report = {"total_prompt_tokens": prompt, "total_cached_tokens": cached,
              "cache_hit_rate_pct": round(cached / prompt * 100, 2) if cached is not None and prompt else None,
              "device_cached_tokens": tier("device") if tiers else None,
              "host_cached_tokens": tier("host") if tiers else None,
              "storage_cached_tokens": storage or None, "storage_backend": backend}  # fmt: skip
    recs = [r for r in records if not r.warmup]
    return report, {"cached_tokens": [r.cached_tokens for r in recs],
                    "cached_tokens_details": [r.cached_tokens_details for r in recs]}


def sglang_benchmark_result(records: Sequence[RequestRecord], *, duration_s: float, tokenizer: Any | None = None,
                            goodput_ms: dict[str, float] | None = None, streamed: bool = True,
                            cache_report: bool = False) -> dict[str, Any]:  # fmt: skip
    """SGLang's result keys and per-request lists (``goodput_ms`` keyed ttft / tpot / e2el; ``streamed`` false:
    the responses came whole, so no TPOT; ``cache_report``: SGLang's ``cache_report`` key and lists)."""
    recs = [r for r in records if not r.warmup]
    ok = [r for r in recs if r.ok]
    ttft = [(r.first_token_ns - r.scheduled_ns) / _S if r.ok and r.first_token_ns else None for r in recs]
    lat = [(r.end_ns - r.scheduled_ns) / _S if r.ok else None for r in recs]
    itls = [[x / 1e3 for x in itl_ms(r)] for r in recs]
    out_lens = [r.output_tokens if r.ok else 0 for r in recs]
    rows: list[tuple[float, float, float] | None] = []
    tpots: list[float] = []
    for i, r in enumerate(recs):
        t, e = ttft[i], lat[i]
        if not r.ok or t is None or e is None:
            rows.append(None)
            continue
        tpot = (e - t) / (out_lens[i] - 1) if out_lens[i] > 1 else 0.0
        tpots += [tpot] if out_lens[i] > 1 and streamed else []
        rows.append((t, tpot, e))
    retok = [len(tokenizer.encode(r.output_text, add_special_tokens=False).ids) if r.ok else 0
             for r in recs] if tokenizer is not None else None  # fmt: skip
    dur = duration_s if duration_s > 0 else math.nan  # no duration: the rates below are null, never NaN

    def per_s(x: float) -> float | None:
        return x / dur if duration_s > 0 else None

    total_in = sum(r.input_tokens or r.prompt_tokens or 0 for r in ok)
    total_out = sum(out_lens)
    peak_tokens, peak_conc = _peaks(ok)
    res: dict[str, Any] = {
        "duration": duration_s, "completed": len(ok), "total_input_tokens": total_in,
        "total_input_text_tokens": total_in, "total_input_vision_tokens": 0, "total_output_tokens": total_out,
        "total_output_tokens_retokenized": sum(retok) if retok is not None else None,
        "request_throughput": per_s(len(ok)), "input_throughput": per_s(total_in),
        "output_throughput": per_s(total_out), "total_throughput": per_s(total_in + total_out),
        **_stats("e2e_latency", [x for x in lat if x is not None]),
        **_stats("ttft", [x for x in ttft if x is not None]),
        **_stats("tpot", tpots), **_stats("itl", [x for i, r in enumerate(recs) if r.ok for x in itls[i]], True),
        "concurrency": per_s(math.fsum(x for x in lat if x is not None)), "accept_length": None,
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_conc,
    }  # fmt: skip
    if goodput_ms and duration_s > 0:
        res.update(_goodput(rows, goodput_ms, dur))
    lists: dict[str, list[Any]] = {}
    if cache_report:
        res["cache_report"], lists = sglang_cache_report(records)
    res["details"] = {
        "input_lens": [r.input_tokens or r.prompt_tokens for r in recs], "output_lens": out_lens,
        "ttfts": ttft, "itls": itls, "generated_texts": [r.output_text for r in recs],
        "errors": [r.error_message for r in recs], **lists,
    }  # fmt: skip
    return res
