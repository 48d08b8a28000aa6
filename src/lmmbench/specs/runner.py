"""The spec runner: warm-up, repeats, cache clearing, progress, one row per measurement.

Every measured row goes to ``sink`` as soon as it exists (the results writer appends and
flushes it), so Ctrl-C or a crash loses nothing already measured; ``done`` holds the
``(sample_id, repeat)`` pairs already in the results file, which ``--resume`` skips. A failing
measurement is a row with ``status=failed`` and its reason; the run goes on. A measurement
may return ``status="degraded"`` and an ``error`` among its fields (its input reached the model
but a stage went unmeasured): the row says so and is counted apart from ``ok``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lmmbench.core.clock import wall_label
from lmmbench.core.errors import UserError
from lmmbench.specs.base import Case, Spec, SpecContext

__all__ = ["BASE_COLUMNS", "RunStats", "UnifiedRunner"]

log = logging.getLogger(__name__)

BASE_COLUMNS = ("spec", "sample_id", "group", "repeat", "status", "error", "measured_at")


@dataclass
class RunStats:
    """How many rows were measured, failed, or skipped (already present)."""

    ok: int = 0
    failed: int = 0
    skipped: int = 0
    degraded: int = 0
    extra_repeats: int = 0  # added by --target-ci-pct
    ci_not_reached: list[str] = field(default_factory=list)  # samples still wider than the target at max_repeats


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:500]


class UnifiedRunner:
    """Runs a spec's cases: ``warmup`` unrecorded runs, then ``repeats`` measured ones each."""

    def __init__(self, spec: Spec, ctx: SpecContext, sink: Callable[[dict[str, Any]], None],
                 done: set[tuple[str, int]] | None = None) -> None:
        self.spec = spec
        self.ctx = ctx
        self.sink = sink
        self.done = done or set()
        self.totals: dict[str, list[float]] = {}  # case id -> the total field of its ok rows (this run)

    def _row(self, case: Case, repeat: int, status: str, error: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {
            "spec": self.spec.name,
            "sample_id": case.id,
            "group": case.group,
            "repeat": repeat,
            "status": status,
            "error": error,
            "measured_at": wall_label(),
            **case.extra,
            **fields,
        }

    def run(self, cases: list[Case], repeats: int, warmup: int, clear_cache: bool = True,
            progress: bool = True, interleave: bool = False, target_ci_pct: float | None = None,
            max_repeats: int = 30) -> RunStats:
        """Measure every case; returns counts. KeyboardInterrupt propagates after rows are flushed.

        By default each case runs its warm-up then its repeats back to back; ``interleave`` warms
        every case up first, then measures repeat 0 of every case, repeat 1 of every case, ...
        so a burst of load on a shared machine hits one repeat of many cases, not one case.
        """
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        stats = RunStats()
        todo = {c.id: [r for r in range(repeats) if (c.id, r) not in self.done] for c in cases}
        stats.skipped = sum(repeats - len(v) for v in todo.values())
        if interleave:
            order = [(c, r) for r in range(repeats) for c in cases if r in todo[c.id]]
        else:
            order = [(c, r) for c in cases for r in todo[c.id]]
        warm_error: dict[str, str | None] = {}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      disable=not progress, transient=False) as bar:
            task = bar.add_task(self.spec.name, total=len(cases) * repeats, completed=stats.skipped)
            if interleave:
                for case in cases:
                    if todo[case.id]:
                        bar.update(task, description=f"{self.spec.name} warm-up {case.id}")
                        warm_error[case.id] = self._warmup(case, warmup)
            profile_id = self._profile_target(cases)
            for case, r in order:
                bar.update(task, description=f"{self.spec.name} {case.id}")
                if case.id not in warm_error:
                    warm_error[case.id] = self._warmup(case, warmup)
                self._measure(case, r, warm_error[case.id], clear_cache, stats)
                if (case.id, r) == profile_id and warm_error[case.id] is None:
                    self._profile(case, r)
                bar.advance(task)
            if target_ci_pct is not None:
                for case in cases:
                    self._until_precise(case, repeats, max_repeats, target_ci_pct, warm_error.get(case.id),
                                        clear_cache, stats)
        return stats

    def _until_precise(self, case: Case, repeats: int, max_repeats: int, target_pct: float,
                       warm_error: str | None, clear_cache: bool, stats: RunStats) -> None:
        """More repeats of ``case`` until its total's median CI is within ``target_pct`` % (or max_repeats)."""
        from lmmbench.metrics.noise import ci_half_width_pct

        r = repeats
        while r < max_repeats and warm_error is None:
            width = ci_half_width_pct(self.totals.get(case.id, []))
            if width is not None and width <= target_pct:
                return
            if (case.id, r) not in self.done:
                self._measure(case, r, warm_error, clear_cache, stats)
                stats.extra_repeats += 1
            r += 1
        width = ci_half_width_pct(self.totals.get(case.id, []))
        if width is None or width > target_pct:
            stats.ci_not_reached.append(case.id)

    def _profile_target(self, cases: list[Case]) -> tuple[str, int] | None:
        opts = self.ctx.options
        if not getattr(opts, "profile", False) or not cases:
            return None
        sample = opts.profile_sample or cases[0].id
        if sample not in {c.id for c in cases}:
            raise UserError(f"--profile-sample {sample}: no such sample; samples: {', '.join(c.id for c in cases)}")
        if opts.profile_repeat >= opts.repeats and not getattr(opts, "target_ci_pct", None):  # no trace, silently
            raise UserError(f"--profile-repeat {opts.profile_repeat}: the run measures repeats 0 to {opts.repeats - 1} "
                            f"(--repeats {opts.repeats}); give one of those")  # fmt: skip
        return sample, opts.profile_repeat

    def _profile(self, case: Case, r: int) -> None:
        """One extra, unrecorded run under the torch profiler (see lmmbench.specs.profile_run)."""
        from lmmbench.specs.profile_run import profile_once

        profile_once(self.spec, self.ctx, case, r)

    def _measure(self, case: Case, r: int, warm_error: str | None, clear_cache: bool, stats: RunStats) -> None:
        if warm_error is not None:
            self.sink(self._row(case, r, "failed", warm_error, {}))
            stats.failed += 1
            return
        if clear_cache:
            self.spec.clear_cache(self.ctx)
        try:
            fields = self.spec.run_once(self.ctx, case)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            log.debug("sample %s repeat %d failed", case.id, r, exc_info=True)
            self.sink(self._row(case, r, "failed", _reason(exc), {}))
            stats.failed += 1
        else:
            status, error = str(fields.pop("status", "ok")), str(fields.pop("error", ""))
            self.sink(self._row(case, r, status, error, fields))
            if status == "degraded":
                stats.degraded += 1
            else:
                stats.ok += 1
            total = fields.get(getattr(self.spec, "total_field", "ttft_ms"))
            if isinstance(total, (int, float)):
                self.totals.setdefault(case.id, []).append(float(total))

    def _warmup(self, case: Case, warmup: int) -> str | None:
        self.ctx.warmup = True
        try:
            for _ in range(warmup):
                try:
                    self.spec.run_once(self.ctx, case)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:
                    log.debug("warm-up of %s failed", case.id, exc_info=True)
                    return _reason(exc)
        finally:
            self.ctx.warmup = False
        return None
