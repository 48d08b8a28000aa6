"""Finding and comparing runs as library calls (`lmmbench runs ...`, tests, CI scripts).

``compare_runs(baseline_refs, candidate_refs)`` resolves each reference through the run store (an
id, an id prefix or a run folder), reads every run's per-request / per-sample values, and compares
each metric the two sides share, per group (perf load point, eval task, spec: all rows), with a
bootstrap interval that pools the runs of a side. Prompt differences (the registered prompts, name@version
and hash), then config, measurement and environment differences are listed first: runs with different
configs are compared only on what they share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.runs.log import RunLog, load_run_log
from lmmbench.core.runs.store import RunStore, StoredRun
from lmmbench.metrics.compare import DEFAULT_RESAMPLES, MetricComparison, compare_metric, confirm, rule_for
from lmmbench.sessions.run_samples import PERF_REQUEST_METRICS, PERF_RUN_METRICS, RunSamples, load_samples

__all__ = ["ResolvedRun", "RunComparison", "compare_runs", "prompt_differences", "resolve_runs"]

_CONFIG_IGNORED = {"run_name", "out_dir", "progress", "plots", "resume", "config_file"}
_ENV_KEYS = ("host", "cpu", "cpu_count", "gpu", "python", "platform", "libraries", "git")


@dataclass
class ResolvedRun:
    """A run found in the store, with its log and folder."""

    stored: StoredRun
    run_log: RunLog
    folder: Path


@dataclass
class RunComparison:
    """Side A (baseline) against side B: differences first, then every shared metric."""

    side_a: list[ResolvedRun]
    side_b: list[ResolvedRun]
    prompt_diff: list[tuple[str, Any, Any]] = field(default_factory=list)  # (prompt name, A's ref+hash, B's)
    config_diff: list[tuple[str, Any, Any]] = field(default_factory=list)
    environment_diff: list[tuple[str, Any, Any]] = field(default_factory=list)
    metrics: list[tuple[str, MetricComparison]] = field(default_factory=list)  # (group, comparison)
    not_shared: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[tuple[str, MetricComparison]]:
        """The metrics flagged as regressions."""
        return [(g, m) for g, m in self.metrics if m.verdict == "regression"]

    @property
    def improvements(self) -> list[tuple[str, MetricComparison]]:
        """The metrics flagged as improvements."""
        return [(g, m) for g, m in self.metrics if m.verdict == "improvement"]


def resolve_runs(refs: Sequence[str], store: RunStore | None = None) -> list[ResolvedRun]:
    """Each reference (id, id prefix or folder) as a run with its log."""
    store = store or RunStore.open()
    out = []
    for ref in refs:
        stored = store.get(ref)
        folder = Path(stored.path)
        if not folder.exists():
            raise UserError(f"run {stored.run_id}: its folder {folder} is gone; the store only indexes runs")
        out.append(ResolvedRun(stored, load_run_log(folder), folder))
    return out


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): obj}


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    fa, fb = _flatten(a), _flatten(b)
    return [(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def _prompts(config: dict[str, Any]) -> dict[str, str]:
    """``name -> "name@version (sha256 <12 hex>)"`` of the registered prompts a run's config records."""
    out = {}
    for p in config.get("prompts") or []:
        if isinstance(p, dict) and p.get("name"):
            out[str(p["name"])] = f"{p.get('ref')} (sha256 {str(p.get('sha256'))[:12]})"
    return out


def prompt_differences(config_a: dict[str, Any], config_b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The registered prompts two runs asked with, where they differ (name, version or text hash)."""
    pa, pb = _prompts(config_a), _prompts(config_b)
    return [(f"prompt {k}", pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]


def _side_values(side: list[RunSamples], group: str, metric: str) -> list[list[float]]:
    return [s.per_sample.get(group, {}).get(metric, []) for s in side]


def _shared(side_a: list[RunSamples], side_b: list[RunSamples], attr: str) -> tuple[list[tuple[str, str]], list[str]]:
    def keys(side: list[RunSamples]) -> set[tuple[str, str]]:
        sets = [{(g, m) for g, ms in getattr(s, attr).items() for m in ms} for s in side]
        return set.intersection(*sets) if sets else set()

    ka, kb = keys(side_a), keys(side_b)
    only = [f"{g}: {m} (only in {'A' if (g, m) in ka else 'B'})" for g, m in sorted(ka ^ kb)]
    return sorted(ka & kb), only


def _check_thresholds(thresholds: dict[str, float] | None, samples: list[RunSamples]) -> None:
    """A --threshold that names no metric of these runs is a typo: refused with the names there are."""
    known = {m for s in samples for attr in ("per_sample", "per_window", "per_run")
             for ms in getattr(s, attr).values() for m in ms}  # fmt: skip
    known |= {m.split(".")[-1].split(" ")[0] for m in known} | {*PERF_REQUEST_METRICS, *PERF_RUN_METRICS, "error_rate"}
    unknown = sorted(set(thresholds or {}) - known)
    if unknown:
        raise UserError(f"--threshold {unknown[0]}: no metric of that name in these runs; their metrics: "
                        f"{', '.join(sorted(known)) or 'none'}")  # fmt: skip


def compare_runs(refs_a: Sequence[str], refs_b: Sequence[str], *, thresholds: dict[str, float] | None = None,
                 statistics: Sequence[str] = ("mean", "p50"), resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                 store: RunStore | None = None) -> RunComparison:  # fmt: skip
    """Compare the runs ``refs_b`` against the baseline runs ``refs_a`` (each side pooled)."""
    if not refs_a or not refs_b:
        raise UserError("runs compare: give at least one run on each side, e.g. `runs compare A B`")
    store = store or RunStore.open()
    side_a, side_b = resolve_runs(refs_a, store), resolve_runs(refs_b, store)
    kinds = {r.run_log.kind for r in side_a + side_b}
    if len(kinds) > 1:
        raise UserError(f"runs compare: cannot compare runs of different kinds ({', '.join(sorted(kinds))})")
    first_a, first_b = side_a[0].run_log, side_b[0].run_log
    cfg_a = {k: v for k, v in first_a.config.items() if k not in _CONFIG_IGNORED and k != "prompts"}
    cfg_b = {k: v for k, v in first_b.config.items() if k not in _CONFIG_IGNORED and k != "prompts"}
    result = RunComparison(side_a, side_b)
    result.prompt_diff = prompt_differences(first_a.config, first_b.config)
    result.config_diff = _diff({"config": cfg_a, "measurement": first_a.measurement.model_dump()},
                               {"config": cfg_b, "measurement": first_b.measurement.model_dump()})  # fmt: skip
    env_a = {k: first_a.environment.get(k) for k in _ENV_KEYS}
    env_b = {k: first_b.environment.get(k) for k in _ENV_KEYS}
    result.environment_diff = _diff(env_a, env_b)
    samples_a = [load_samples(r.run_log, r.folder) for r in side_a]
    samples_b = [load_samples(r.run_log, r.folder) for r in side_b]
    _check_thresholds(thresholds, samples_a + samples_b)
    shared, only = _shared(samples_a, samples_b, "per_sample")
    result.not_shared = only
    for group, metric in shared:
        rule = rule_for(metric, thresholds)
        stats = statistics if not rule.absolute_points else ("mean",)
        side_a_values, side_b_values = _side_values(samples_a, group, metric), _side_values(samples_b, group, metric)
        found = [compare_metric(metric, side_a_values, side_b_values, statistic=stat, rule=rule, resamples=resamples,
                                seed=seed) for stat in stats]  # fmt: skip
        confirm(found)
        result.metrics += [(group, c) for c in found]
    window_shared, window_only = _shared(samples_a, samples_b, "per_window")
    result.not_shared += window_only
    for group, metric in window_shared:  # throughputs: time windows of each run, their mean is the rate
        values_a = [s.per_window[group][metric] for s in samples_a]
        values_b = [s.per_window[group][metric] for s in samples_b]
        result.metrics.append((group, compare_metric(metric, values_a, values_b, statistic="mean",
                                                     rule=rule_for(metric, thresholds), resamples=resamples,
                                                     seed=seed)))  # fmt: skip
    run_shared, _ = _shared(samples_a, samples_b, "per_run")
    for group, metric in run_shared:  # runs without records: one value per run (an interval only when pooled)
        values_a = [[s.per_run[group][metric]] for s in samples_a]
        values_b = [[s.per_run[group][metric]] for s in samples_b]
        result.metrics.append((group, compare_metric(metric, values_a, values_b, statistic="mean",
                                                     rule=rule_for(metric, thresholds), resamples=resamples,
                                                     seed=seed)))  # fmt: skip
    return result
