"""Each run against its previous one: what changed since the newest earlier run that measured the same workload.

At the end of a spec, perf or eval run, before its report is written, ``compare_with_previous`` finds the
baseline — ``--baseline RUN`` when given (an id, id prefix, folder or name, as `runs compare` takes them),
else the newest earlier run in the run store with the same name, kind and workload fingerprint
(``core.runs.fingerprint``: what decides what a run measured) — compares the two as ``runs compare`` does
(same metrics, intervals and verdicts), writes ``comparison.json`` into the run folder (the report shows it
near the top) and returns the console lines. No earlier run of the name: nothing is written. Earlier runs of
the name, none with this workload: "no comparable earlier run (the newest of this name differs in: ...)" and
no comparison. An explicit ``--baseline`` is compared whatever its workload, its differences said first. A
comparison that compared no metric says so and counts no regression. A comparison that cannot be made is a
warning, never a lost run.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.runs.fingerprint import fingerprint_differences, stored_fingerprint, workload_fingerprint
from lmmbench.core.runs.log import RunLog, load_run_log

__all__ = ["COMPARISON_NAME", "Baseline", "compare_with_previous", "find_baseline", "previous_run_id",
           "print_comparison"]  # fmt: skip

COMPARISON_NAME = "comparison.json"
log = logging.getLogger("lmmbench.previous_run")


def _earlier(run_log: RunLog, store: Any, run_dir: Path | None) -> list[Any]:
    """Stored runs before this one with its name and kind, newest first. A stored run whose folder is ``run_dir``
    is the one this run replaced (``--overwrite``): its files are gone, so it is never the baseline."""
    started = run_log.started_at or ""
    here = _resolved(run_dir) if run_dir is not None else None
    out = []
    for stored in store.list(kind=run_log.kind):
        if stored.name != run_log.name or stored.run_id == run_log.run_id or (stored.started_at or "") > started:
            continue
        if here is not None and _resolved(Path(stored.path)) == here:
            continue
        out.append(stored)
    return out


def previous_run_id(run_log: RunLog, store: Any, run_dir: Path | None = None) -> str | None:
    """The newest run in ``store`` before this one with the same name and kind (None: this is the first),
    whatever its workload."""
    found = _earlier(run_log, store, run_dir)
    return str(found[0].run_id) if found else None


@dataclass
class Baseline:
    """The earlier run this one is compared with (``run_id`` None: none comparable), and the fields of the
    workload fingerprint the newest earlier run of the name (``newest``) differs in."""

    run_id: str | None
    newest: str | None = None
    differs_in: list[str] = field(default_factory=list)


def _fingerprint_of(stored: Any) -> dict[str, Any] | None:
    """The fingerprint an earlier run recorded; one written before fingerprints were kept gets one computed from its
    log now (a field its log lacks then differs, and is named)."""
    try:
        run_log = load_run_log(Path(stored.path))
    except UserError:  # its folder is gone or unreadable: nothing to compare with
        return None
    return stored_fingerprint(run_log) or workload_fingerprint(run_log)


def find_baseline(run_log: RunLog, store: Any, run_dir: Path | None = None) -> Baseline | None:
    """The newest earlier run of this name and kind with this run's workload fingerprint; None when there is no
    earlier run of the name at all."""
    earlier = _earlier(run_log, store, run_dir)
    if not earlier:
        return None
    mine = stored_fingerprint(run_log) or workload_fingerprint(run_log)
    newest_differs: list[str] | None = None
    for stored in earlier:
        differs = fingerprint_differences(_fingerprint_of(stored), mine)
        if not differs:
            return Baseline(str(stored.run_id))
        if newest_differs is None:
            newest_differs = differs
    return Baseline(None, str(earlier[0].run_id), newest_differs or [])


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _payload(result: Any, baseline: Any, differs_in: list[str], explicit: bool) -> dict[str, Any]:
    metrics = [{"group": g, "metric": m.metric, "statistic": m.statistic, "a": _finite(m.a), "b": _finite(m.b),
                "change": _finite(m.change), "ci_low": _finite(m.ci_low), "ci_high": _finite(m.ci_high),
                "unit": m.unit, "verdict": m.verdict, "threshold": m.threshold} for g, m in result.metrics]  # fmt: skip
    compared = sum(m["change"] is not None for m in metrics)
    return {
        "baseline": {"run_id": baseline.run_log.run_id, "name": baseline.run_log.name,
                     "started_at": baseline.run_log.started_at, "path": str(baseline.folder),
                     "chosen": "--baseline" if explicit else "the newest earlier run of this name and workload"},
        "workload_differences": differs_in,
        "metrics_compared": compared,
        # no metric compared: no count at all (a "0 regression(s)" would claim a check that was not made)
        "regressions": sum(m["verdict"] == "regression" for m in metrics) if compared else None,
        "improvements": sum(m["verdict"] == "improvement" for m in metrics) if compared else None,
        "config_diff": [[k, a, b] for k, a, b in result.config_diff],
        "metrics": metrics,
    }


def _lines(payload: dict[str, Any]) -> list[str]:
    base = payload["baseline"]
    which = "the baseline" if base.get("chosen") == "--baseline" else "the previous run"
    out = []
    if payload.get("workload_differences"):
        out.append(f"{which} {base['run_id']} measured another workload; it differs in: "
                   + "; ".join(payload["workload_differences"]))
    if not payload["metrics_compared"]:
        return [*out, f"against {which} {base['run_id']}: no metric compared (the two runs share no measured metric)"]
    flagged = [m for m in payload["metrics"] if m["verdict"] in ("regression", "improvement")]
    head = (f"against {which} {base['run_id']}: {payload['regressions']} regression(s), "
            f"{payload['improvements']} improvement(s) over {payload['metrics_compared']} metric(s) compared")
    out.append(head + ("" if flagged else " (no change beyond its interval and threshold)"))
    for m in flagged:
        ci = "" if m["ci_low"] is None else f" [{m['ci_low']:+.1f}, {m['ci_high']:+.1f}]"
        out.append(f"  {m['verdict']}: {m['group']} {m['metric']} {m['statistic']} {m['change']:+.1f} {m['unit']}{ci}")
    return out


def _not_comparable(found: Baseline) -> tuple[dict[str, Any], list[str]]:
    differs = "; ".join(found.differs_in) or "its workload"
    payload = {"baseline": None, "newest_of_name": found.newest, "workload_differences": found.differs_in,
               "metrics_compared": 0, "regressions": None, "improvements": None, "metrics": []}  # fmt: skip
    return payload, [f"no comparable earlier run (the newest of this name, {found.newest}, differs in: {differs})"]


def check_baseline(baseline: str | None) -> None:
    """Resolve ``--baseline`` before anything is measured: a run the store does not know is one line now,
    not after the measurement."""
    if baseline:
        from lmmbench.core.runs.store import RunStore

        RunStore.open().get(baseline)


def compare_with_previous(run_dir: Path, run_log: RunLog, baseline: str | None = None) -> list[str]:
    """Write ``comparison.json`` of this run against its baseline; the console lines ([] when no earlier run of
    the name exists)."""
    from lmmbench.core.runs.store import RunStore
    from lmmbench.reports.json_files import write_json
    from lmmbench.sessions.runs_session import compare_runs, resolve_runs

    try:
        store = RunStore.open()
        differs: list[str] = []
        if baseline:
            base_run = resolve_runs([baseline], store)[0]
            base_log = base_run.run_log
            differs = fingerprint_differences(stored_fingerprint(base_log) or workload_fingerprint(base_log),
                                              stored_fingerprint(run_log) or workload_fingerprint(run_log))
            ref = baseline
        else:
            found = find_baseline(run_log, store, run_dir)
            if found is None:
                return []
            if found.run_id is None:
                payload, lines = _not_comparable(found)
                write_json(run_dir / COMPARISON_NAME, payload)
                return lines
            ref = found.run_id
        result = compare_runs([ref], [str(run_dir)], store=store)
        payload = _payload(result, resolve_runs([ref], store)[0], differs, explicit=bool(baseline))
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
