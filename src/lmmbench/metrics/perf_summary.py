"""The typed summary of one load point: a ``Distribution`` per per-request metric (with its unit) and the
point's counts and rates (``PerfSummary``).

``to_dict`` is the one way a summary is written (report.json's ``lmmbench`` entries, the public API's
``result.summary[...]``): the same keys, in the same order, as the dictionaries summaries were before
they were typed; ``from_dict`` reads one back (old report.json files included). Both classes also read
as read-only mappings of that dictionary, so ``result.summary["metrics"]["ttft_ms"]["p99"]`` keeps
working for callers of the documented API.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lmmbench.metrics.stats import summarize

__all__ = ["Distribution", "PerfSummary", "metric_unit"]

_UNITS = (("_ms", "ms"), ("_tokens", "tokens"), ("_bytes", "bytes"))


def metric_unit(name: str) -> str:
    """The unit a metric's name carries: ``ttft_ms`` -> ms, ``output_tokens`` -> tokens."""
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "")


class _AsMapping(Mapping[str, Any]):
    """Read-only mapping view of ``to_dict()`` (the summaries' documented dictionary form)."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


@dataclass(frozen=True, eq=False)
class Distribution(_AsMapping):
    """One metric over a point's requests: count, mean, std (population), min, percentiles, max (NaN: none)."""

    unit: str
    count: float
    mean: float
    std: float
    min: float
    max: float
    percentiles: dict[str, float] = field(default_factory=dict)  # p50 -> value, ascending

    @property
    def p50(self) -> float:
        return self.percentiles.get("p50", math.nan)

    @property
    def p90(self) -> float:
        return self.percentiles.get("p90", math.nan)

    @property
    def p99(self) -> float:
        return self.percentiles.get("p99", math.nan)

    @classmethod
    def of(cls, values: list[float], unit: str, percentiles: tuple[float, ...] | list[float]) -> Distribution:
        """The distribution of ``values`` (None and NaN left out) with ``percentiles`` (p50/p90/p99 always)."""
        return cls.from_dict(summarize(values, percentiles), unit)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], unit: str = "") -> Distribution:
        """Read the dictionary form (``count``, ``mean``, ``std``, ``min``, ``p..``, ``max``)."""
        pct = {k: float(v) for k, v in data.items() if k.startswith("p")}
        return cls(unit, float(data.get("count", math.nan)), float(data.get("mean", math.nan)),
                   float(data.get("std", math.nan)), float(data.get("min", math.nan)),
                   float(data.get("max", math.nan)), pct)  # fmt: skip

    def to_dict(self) -> dict[str, float]:
        """count, mean, std, min, the percentiles, max: the layout of every metric in the result files."""
        return {"count": self.count, "mean": self.mean, "std": self.std, "min": self.min, **self.percentiles,
                "max": self.max}  # fmt: skip


@dataclass(frozen=True, eq=False)
class PerfSummary(_AsMapping):
    """One load point: counts, duration, rates and throughputs (per second), SLO goodput, metric distributions."""

    requests: int
    ok: int
    errors: int
    not_sent: int | None  # None: not recorded (a summary written before lmmbench counted it)
    errors_by_kind: dict[str, int]
    duration_s: float
    send_rate_rps: float
    qps: float
    input_token_throughput: float
    output_token_throughput: float
    total_token_throughput: float
    goodput_qps: float
    slo: dict[str, float]
    slo_attainment: float
    token_sources: dict[str, int]
    new_connections: int | None  # None: not recorded
    metrics: dict[str, Distribution]

    @property
    def error_rate(self) -> float:
        """Failed requests over requests sent (NaN when none was sent)."""
        return self.errors / self.requests if self.requests else math.nan

    def to_dict(self) -> dict[str, Any]:
        """The summary as written to report.json (``lmmbench``) and read by ``result.summary[...]``."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _SCALARS}
        out["metrics"] = {name: d.to_dict() for name, d in self.metrics.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerfSummary:
        """Read a summary as written (report.json's ``lmmbench`` entry of any lmmbench version)."""
        nan = math.nan
        metrics = {k: Distribution.from_dict(v, metric_unit(k)) for k, v in (data.get("metrics") or {}).items()}
        return cls(
            requests=int(data.get("requests", 0)), ok=int(data.get("ok", 0)), errors=int(data.get("errors", 0)),
            not_sent=_count_or_none(data.get("not_sent")), errors_by_kind=dict(data.get("errors_by_kind") or {}),
            duration_s=float(data.get("duration_s", nan)), send_rate_rps=float(data.get("send_rate_rps", nan)),
            qps=float(data.get("qps", nan)), input_token_throughput=float(data.get("input_token_throughput", nan)),
            output_token_throughput=float(data.get("output_token_throughput", nan)),
            total_token_throughput=float(data.get("total_token_throughput", nan)),
            goodput_qps=float(data.get("goodput_qps", nan)), slo=dict(data.get("slo") or {}),
            slo_attainment=float(data.get("slo_attainment", nan)),
            token_sources=dict(data.get("token_sources") or {}),
            new_connections=_count_or_none(data.get("new_connections")), metrics=metrics,
        )  # fmt: skip


def _count_or_none(value: Any) -> int | None:
    """A count as written, or None where the file does not hold it (unrecorded is not 0)."""
    return None if value is None else int(value)


_SCALARS = ("requests", "ok", "errors", "not_sent", "errors_by_kind", "duration_s", "send_rate_rps", "qps",
            "input_token_throughput", "output_token_throughput", "total_token_throughput", "goodput_qps", "slo",
            "slo_attainment", "token_sources", "new_connections")  # fmt: skip
