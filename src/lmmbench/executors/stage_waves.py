"""Running a plan's rows by their ``needs`` (see ``executors.stages``): a row starts as soon as every row it needs
has ended and a pool slot is free; a row whose needs did not all succeed is finished as skipped, naming the row.

On the local pool (``subprocess``, ``venv``, ``container``), every row is handed to the pool at once and waits
for its needs in its own thread (``pool.GATE``), holding no slot meanwhile, so an unrelated slow row never delays
it. Plans whose rows run on other executors (``inprocess``, which runs one row at a time in the driver; ``ray``,
third-party ones), or on several executors, run in waves: a wave holds every row whose needs have all ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lmmbench.executors.jobs import Job, RowResult

__all__ = ["GATED_EXECUTORS", "run_in_stages", "skipped_by"]

GATED_EXECUTORS = ("subprocess", "venv", "container")  # executors whose pool starts each row when its needs end
_POLL_S = 0.02


def skipped_by(job_needs: list[str], done: dict[str, RowResult]) -> str | None:
    """Why a row is skipped: the first of its needs that did not succeed (None: all did)."""
    for need in job_needs:
        res = done.get(need)
        if res is None or res.status != "ok":
            state = "did not run" if res is None else res.status
            return f"needs row '{need}', which {state}" + (f": {res.error}" if res is not None and res.error else "")
    return None


def _skip(job: Job, cause: str) -> RowResult:
    return RowResult(name=job.name, kind=job.kind, status="skipped", executor=job.executor, model=job.model,
                     attempts=0, error=cause)  # fmt: skip


def run_in_stages(jobs: list[Job], needs: dict[str, list[str]], done: dict[str, RowResult],
                  run_wave: Callable[[list[Job]], None], finish: Callable[[RowResult], None],
                  refresh: Callable[[list[Job]], list[Job]]) -> None:  # fmt: skip
    """Run ``jobs``: each as soon as its needs have ended (one gated pool) or wave by wave (see the module
    docstring). A job whose needs did not all succeed is finished as skipped, with the cause; ``refresh``
    re-resolves jobs (their hand-off filled in from the results so far) just before they run."""
    names = {j.name for j in jobs}
    executors = {j.executor for j in jobs}
    if any(needs.get(j.name) for j in jobs) and len(executors) == 1 and executors <= set(GATED_EXECUTORS):
        _run_gated(jobs, needs, done, run_wave, finish, refresh, names)
        return
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
                finish(_skip(job, cause))
        if wave:
            run_wave(refresh(wave))


def _run_gated(jobs: list[Job], needs: dict[str, list[str]], done: dict[str, RowResult],
               run_wave: Callable[[list[Job]], None], finish: Callable[[RowResult], None],
               refresh: Callable[[list[Job]], list[Job]], names: set[str]) -> None:  # fmt: skip
    """Every job to the one pool at once; each waits in its own thread until its needs have ended."""
    from lmmbench.executors.pool import GATE

    def gate(job: Job, stopped: Callable[[], bool]) -> Job | None:
        mine = needs.get(job.name, [])
        while not all(n in done or n not in names for n in mine):
            if stopped():
                return None
            time.sleep(_POLL_S)
        cause = skipped_by(mine, done)
        if cause is not None:
            finish(_skip(job, cause))
            return None
        return refresh([job])[0] if mine else job

    token = GATE.set(gate)
    try:
        run_wave(jobs)
    finally:
        GATE.reset(token)
