"""Each run against its previous one: what changed since the newest earlier run of the same name and kind.

At the end of a spec, perf or eval run, before its report is written, ``compare_with_previous`` finds the
baseline — ``--baseline RUN`` when given (an id, id prefix, folder or name, as `runs compare` takes them),
else the newest earlier run in the run store with the same name and kind — compares the two as
``runs compare`` does (same metrics, intervals and verdicts), writes ``comparison.json`` into the run
folder (the report shows it near the top) and returns the console lines. No earlier run: nothing is
written. A comparison that cannot be made is a warning, never a lost run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.runs.log import RunLog

__all__ = ["COMPARISON_NAME", "compare_with_previous", "previous_run_id", "print_comparison"]

COMPARISON_NAME = "comparison.json"
log = logging.getLogger("lmmbench.previous_run")


def previous_run_id(run_log: RunLog, store: Any, run_dir: Path | None = None) -> str | None:
    """The newest run in ``store`` before this one with the same name and kind (None: this is the first).
    A stored run whose folder is ``run_dir`` is the one this run replaced (``--overwrite``): its files are gone,
    so it is never the baseline."""
    started = run_log.started_at or ""
    here = _resolved(run_dir) if run_dir is not None else None
    for stored in store.list(kind=run_log.kind):
        if stored.name != run_log.name or stored.run_id == run_log.run_id or (stored.started_at or "") > started:
            continue
        if here is not None and _resolved(Path(stored.path)) == here:
            continue
        return str(stored.run_id)
    return None


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _payload(result: Any, baseline: Any) -> dict[str, Any]:
    metrics = [{"group": g, "metric": m.metric, "statistic": m.statistic, "a": m.a, "b": m.b, "change": m.change,
                "ci_low": m.ci_low, "ci_high": m.ci_high, "unit": m.unit, "verdict": m.verdict,
                "threshold": m.threshold} for g, m in result.metrics]  # fmt: skip
    return {
        "baseline": {"run_id": baseline.run_log.run_id, "name": baseline.run_log.name,
                     "started_at": baseline.run_log.started_at, "path": str(baseline.folder)},
        "regressions": sum(m["verdict"] == "regression" for m in metrics),
        "improvements": sum(m["verdict"] == "improvement" for m in metrics),
        "config_diff": [[k, a, b] for k, a, b in result.config_diff],
        "metrics": metrics,
    }


def _lines(payload: dict[str, Any]) -> list[str]:
    base = payload["baseline"]
    flagged = [m for m in payload["metrics"] if m["verdict"] in ("regression", "improvement")]
    head = (f"against the previous run {base['run_id']}: {payload['regressions']} regression(s), "
            f"{payload['improvements']} improvement(s)")
    out = [head + ("" if flagged else " (no change beyond its interval and threshold)")]
    for m in flagged:
        ci = "" if m["ci_low"] is None else f" [{m['ci_low']:+.1f}, {m['ci_high']:+.1f}]"
        out.append(f"  {m['verdict']}: {m['group']} {m['metric']} {m['statistic']} {m['change']:+.1f} {m['unit']}{ci}")
    return out


def check_baseline(baseline: str | None) -> None:
    """Resolve ``--baseline`` before anything is measured: a run the store does not know is one line now,
    not after the measurement."""
    if baseline:
        from lmmbench.core.runs.store import RunStore

        RunStore.open().get(baseline)


def compare_with_previous(run_dir: Path, run_log: RunLog, baseline: str | None = None) -> list[str]:
    """Write ``comparison.json`` of this run against its baseline; the console lines ([] when there is none)."""
    from lmmbench.core.runs.store import RunStore
    from lmmbench.reports.json_files import write_json
    from lmmbench.sessions.runs_session import compare_runs, resolve_runs

    try:
        store = RunStore.open()
        ref = baseline or previous_run_id(run_log, store, run_dir)
        if ref is None:
            return []
        result = compare_runs([ref], [str(run_dir)], store=store)
        payload = _payload(result, resolve_runs([ref], store)[0])
    except UserError as exc:
        if baseline:
            raise
        log.warning("no comparison with the previous run: %s", exc)
        return []
    except Exception as exc:  # the run is measured and written: a failed comparison must not lose it
        log.warning("no comparison with the previous run (%s: %s)", type(exc).__name__, exc)
        return []
    write_json(run_dir / COMPARISON_NAME, payload)
    return _lines(payload)


def print_comparison(run_dir: Path, run_log: RunLog, baseline: str | None = None) -> None:
    """``compare_with_previous``, its lines printed to stderr as ``[compare] ...``."""
    import sys

    for line in compare_with_previous(run_dir, run_log, baseline):
        print(f"[compare] {line}", file=sys.stderr)
