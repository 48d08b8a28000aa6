"""Running a plan's rows in waves by their ``needs`` (see ``executors.stages``): a wave holds every row whose
needs have all ended; a row whose needs did not all succeed is finished as skipped, naming the row."""

from __future__ import annotations

from collections.abc import Callable

from lmmbench.executors.jobs import Job, RowResult

__all__ = ["run_in_stages", "skipped_by"]


def skipped_by(job_needs: list[str], done: dict[str, RowResult]) -> str | None:
    """Why a row is skipped: the first of its needs that did not succeed (None: all did)."""
    for need in job_needs:
        res = done.get(need)
        if res is None or res.status != "ok":
            state = "did not run" if res is None else res.status
            return f"needs row '{need}', which {state}" + (f": {res.error}" if res is not None and res.error else "")
    return None


def run_in_stages(jobs: list[Job], needs: dict[str, list[str]], done: dict[str, RowResult],
                  run_wave: Callable[[list[Job]], None], finish: Callable[[RowResult], None],
                  refresh: Callable[[list[Job]], list[Job]]) -> None:  # fmt: skip
    """Run ``jobs`` wave by wave: a wave holds every job whose needs have all ended. A job whose needs did not
    all succeed is finished as skipped, with the cause; ``refresh`` re-resolves a wave's jobs (their hand-off
    filled in from the results so far) just before it runs."""
    waiting = list(jobs)
    while waiting:
        ready = [j for j in waiting if all(n in done for n in needs.get(j.name, []))]
        if not ready:  # needs of rows that never run (a failed serve row's dependants are finished already)
            ready = waiting
        waiting = [j for j in waiting if j not in ready]
        wave = []
        for job in ready:
            cause = skipped_by(needs.get(job.name, []), done)
            if cause is None:
                wave.append(job)
            else:
                finish(RowResult(name=job.name, kind=job.kind, status="skipped", executor=job.executor,
                                 model=job.model, attempts=0, error=cause))  # fmt: skip
        if wave:
            run_wave(refresh(wave))
