"""The seed's UnifiedRunner: warm-up, repeats, cache clearing, progress, one row per measurement.

Every measured row goes to ``sink`` as soon as it exists (the results writer appends and
flushes it), so Ctrl-C or a crash loses nothing already measured; ``done`` holds the
``(sample_id, repeat)`` pairs already in the results file, which ``--resume`` skips. A failing
measurement is a row with ``status=failed`` and its reason; the run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lmmbench.core.clock import wall_label
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
            progress: bool = True) -> RunStats:
        """Measure every case; returns counts. KeyboardInterrupt propagates after rows are flushed."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        stats = RunStats()
        total = len(cases) * repeats
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      disable=not progress, transient=False) as bar:
            task = bar.add_task(self.spec.name, total=total)
            for case in cases:
                todo = [r for r in range(repeats) if (case.id, r) not in self.done]
                stats.skipped += repeats - len(todo)
                bar.advance(task, repeats - len(todo))
                if not todo:
                    continue
                bar.update(task, description=f"{self.spec.name} {case.id}")
                warm_error = self._warmup(case, warmup)
                for r in todo:
                    if warm_error is not None:
                        self.sink(self._row(case, r, "failed", warm_error, {}))
                        stats.failed += 1
                        bar.advance(task)
                        continue
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
                        self.sink(self._row(case, r, "ok", "", fields))
                        stats.ok += 1
                    bar.advance(task)
        return stats

    def _warmup(self, case: Case, warmup: int) -> str | None:
        for _ in range(warmup):
            try:
                self.spec.run_once(self.ctx, case)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                log.debug("warm-up of %s failed", case.id, exc_info=True)
                return _reason(exc)
        return None
