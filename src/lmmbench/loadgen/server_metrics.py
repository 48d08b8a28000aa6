"""Which Prometheus metrics of vLLM, SGLang and TGI mean what, and how one scrape becomes a telemetry row.

Names are read from the engines' own sources: vLLM 0.33.0 (``vllm/v1/metrics/loggers.py``,
``vllm/v1/spec_decode/metrics.py``) and SGLang 0.5.23 (``sglang/srt/observability/metrics_collector.py``);
TGI's from its documented ``/metrics`` page. Current names come first; a deprecated name is read only when no
current one is exported, and the sampler's notes (kept in the run log) name it.

How label sets (one per engine with data parallelism, one per model) are combined depends on the quantity:
request and token counts add up; fractions (KV-cache use, hit rates) are averaged and also kept per engine,
never summed (two engines at 60 % are 60 %, not 120 %); counters become rates between two scrapes, and the
ratios built from counters (prefix-cache hit rate, speculative-decoding acceptance) are ratios of the summed
increments over the interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SERVER_METRICS", "CounterRatio", "Quantity", "Scrape", "map_server_metrics", "parse_prometheus"]

#: metric name -> {label set -> value}; the label set is its ``k="v"`` pairs, sorted and comma-joined.
Scrape = dict[str, dict[str, float]]

How = Literal["sum", "mean", "rate"]


@dataclass(frozen=True)
class Quantity:
    """One telemetry quantity: how label sets combine, the current names, the deprecated fallbacks."""

    name: str
    how: How
    names: tuple[str, ...]
    deprecated: tuple[str, ...] = ()


@dataclass(frozen=True)
class CounterRatio:
    """``name`` = offset + increment of ``numerator`` / increment of ``denominator`` between two scrapes."""

    name: str
    numerator: tuple[str, ...]
    denominator: tuple[str, ...]
    offset: float = 0.0
    scale: float = 1.0


_VLLM: tuple[Quantity | CounterRatio, ...] = (
    Quantity("running", "sum", ("vllm:num_requests_running",)),
    Quantity("waiting", "sum", ("vllm:num_requests_waiting",)),
    Quantity("kv_cache_usage", "mean", ("vllm:kv_cache_usage_perc",), ("vllm:gpu_cache_usage_perc",)),
    CounterRatio("prefix_cache_hit_rate", ("vllm:prefix_cache_hits_total",), ("vllm:prefix_cache_queries_total",)),
    Quantity("prefix_cache_hit_rate", "mean", (), ("vllm:gpu_prefix_cache_hit_rate",)),
    Quantity("preemptions_per_s", "rate", ("vllm:num_preemptions_total",)),
    Quantity("prompt_tokens_per_s", "rate", ("vllm:prompt_tokens_total",)),
    Quantity("prompt_tokens_cached_per_s", "rate", ("vllm:prompt_tokens_cached_total",)),
    Quantity("generation_tokens_per_s", "rate", ("vllm:generation_tokens_total",)),
    CounterRatio("spec_decode_acceptance_rate", ("vllm:spec_decode_num_accepted_tokens_total",),
                 ("vllm:spec_decode_num_draft_tokens_total",)),
    CounterRatio("spec_decode_acceptance_length", ("vllm:spec_decode_num_accepted_tokens_total",),
                 ("vllm:spec_decode_num_drafts_total",), offset=1.0),
)  # fmt: skip

_SGLANG: tuple[Quantity | CounterRatio, ...] = (
    Quantity("running", "sum", ("sglang:num_running_reqs",)),
    Quantity("waiting", "sum", ("sglang:num_queue_reqs",)),
    Quantity("kv_cache_usage", "mean", ("sglang:token_usage",)),
    Quantity("kv_used_tokens", "sum", ("sglang:num_used_tokens",)),
    Quantity("kv_capacity_tokens", "sum", ("sglang:max_total_num_tokens",)),
    Quantity("prefix_cache_hit_rate", "mean", ("sglang:cache_hit_rate",)),
    Quantity("retractions_per_s", "rate", ("sglang:num_retracted_requests_total",)),
    Quantity("prompt_tokens_per_s", "rate", ("sglang:prompt_tokens_total",)),
    Quantity("prompt_tokens_cached_per_s", "rate", ("sglang:cached_tokens_total",)),
    Quantity("generation_tokens_per_s", "rate", ("sglang:generation_tokens_total",)),
    Quantity("spec_decode_acceptance_rate", "mean", ("sglang:spec_accept_rate",)),
    Quantity("spec_decode_acceptance_length", "mean", ("sglang:spec_accept_length",)),
)

_TGI: tuple[Quantity | CounterRatio, ...] = (
    Quantity("running", "sum", ("tgi_batch_current_size",)),
    Quantity("waiting", "sum", ("tgi_queue_size",)),
)

#: Per server family, its quantities (the family is the first whose names the page exports).
SERVER_METRICS: dict[str, tuple[Quantity | CounterRatio, ...]] = {"vllm": _VLLM, "sglang": _SGLANG, "tgi": _TGI}


def _labels_key(raw: str) -> str:
    pairs = [p.strip() for p in raw.split(",") if "=" in p]
    return ",".join(sorted(pairs))


def parse_prometheus(text: str) -> Scrape:
    """Metric name -> {label set -> value} of a Prometheus text page; comments and bad lines skipped."""
    out: Scrape = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            labels, _, rest = rest.rpartition("}")
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        out.setdefault(name.strip(), {})[_labels_key(labels)] = value
    return out


def _first(scrape: Scrape, names: tuple[str, ...]) -> tuple[str, dict[str, float]] | None:
    return next(((n, scrape[n]) for n in names if n in scrape), None)


def _engine_keys(samples: dict[str, float]) -> dict[str, float]:
    """Label sets without the labels every sample shares (``engine=0`` rather than the full set)."""
    split = {k: dict(p.split("=", 1) for p in k.split(",") if p) for k in samples}
    keys = set().union(*split.values()) if split else set()
    varying = sorted(k for k in keys if len({s.get(k) for s in split.values()}) > 1)
    return {",".join(f"{k}={split[s].get(k, '').strip(chr(34))}" for k in varying): v for s, v in samples.items()}


class _Row:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.per_engine: dict[str, dict[str, float]] = {}
        self.deprecated: list[str] = []


def _gauge_or_rate(
    q: Quantity, now: Scrape, prev: Scrape | None, dt_s: float | None, row: _Row, current: set[str]
) -> None:
    found = _first(now, q.names)
    if found is None:
        if q.name in current:
            return  # the engine exports a current name for this quantity: no deprecated fallback
        found = _first(now, q.deprecated)
        if found is None:
            return
        row.deprecated.append(f"{found[0]} (for {q.name})")
    name, samples = found
    if q.how == "sum":
        row.values[q.name] = sum(samples.values())
    elif q.how == "mean":
        row.values[q.name] = sum(samples.values()) / len(samples)
        if len(samples) > 1:
            row.per_engine[q.name] = _engine_keys(samples)
    elif prev is not None and dt_s and name in prev:
        row.values[q.name] = (sum(samples.values()) - sum(prev[name].values())) / dt_s


def _ratio(q: CounterRatio, now: Scrape, prev: Scrape | None, row: _Row) -> None:
    num, den = _first(now, q.numerator), _first(now, q.denominator)
    if prev is None or num is None or den is None or num[0] not in prev or den[0] not in prev:
        return
    d_den = sum(den[1].values()) - sum(prev[den[0]].values())
    if d_den > 0:
        d_num = sum(num[1].values()) - sum(prev[num[0]].values())
        row.values[q.name] = q.offset + q.scale * d_num / d_den


def map_server_metrics(
    now: Scrape, previous: Scrape | None = None, dt_s: float | None = None
) -> tuple[dict[str, Any], list[str]]:
    """One telemetry row from a scrape (rates and counter ratios need the previous scrape and the seconds
    between them), and the deprecated names it had to read. ``({}, [])`` when no known name is exported."""
    for family, quantities in SERVER_METRICS.items():
        row = _Row()
        current = {q.name for q in quantities if any(n in now for n in _current_names(q))}
        for q in quantities:
            if q.name in row.values:
                continue  # a current quantity already found: its deprecated twin is not read
            if isinstance(q, CounterRatio):
                _ratio(q, now, previous, row)
            else:
                _gauge_or_rate(q, now, previous, dt_s, row, current)
        if not _exports_family(now, quantities):
            continue
        out: dict[str, Any] = {"server": family, **row.values}
        if row.per_engine:
            out["per_engine"] = row.per_engine
        return out, row.deprecated
    return {}, []


def _current_names(q: Quantity | CounterRatio) -> tuple[str, ...]:
    return q.names if isinstance(q, Quantity) else (*q.numerator, *q.denominator)


def _exports_family(now: Mapping[str, Any], quantities: tuple[Quantity | CounterRatio, ...]) -> bool:
    for q in quantities:
        names = (*q.names, *q.deprecated) if isinstance(q, Quantity) else _current_names(q)
        if any(n in now for n in names):
            return True
    return False
