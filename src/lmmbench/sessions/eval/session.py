"""An eval run as the CLI runs it: ``run_eval``, then the comparison with the previous run (or
``--baseline``) written into the run folder and shown by its report."""

from __future__ import annotations

from typing import Any

__all__ = ["run_eval_compared"]


def run_eval_compared(cfg: Any) -> tuple[Any, list[str]]:
    """``evaluation.run_eval(cfg)``; when it scored anything, ``comparison.json`` against the baseline and the
    report written again to show it. Returns the run and the comparison's console lines."""
    from lmmbench.core.runs.log import load_run_log
    from lmmbench.evaluation.modes import run_eval
    from lmmbench.reports.html_report import write_reports
    from lmmbench.sessions.previous_run import check_baseline, compare_with_previous

    check_baseline(cfg.baseline)
    run = run_eval(cfg)
    if not run.results:
        return run, []
    lines = compare_with_previous(run.run_dir, load_run_log(run.run_dir), cfg.baseline)
    if lines:
        write_reports("eval", run.run_dir)
    return run, lines
