"""The ``inprocess`` and ``subprocess`` executors.

``inprocess`` runs rows one after another in the driver's own process (no isolation: a crash ends
the plan). ``subprocess`` runs each row in a fresh interpreter through the worker pool, as
AISBench's LocalRunner does: the resolved job goes to ``<row>/job.json``, and a crash fails (or
retries) only that row.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lmmbench.executors.base import EXECUTORS, DoneCallback, Executor, ExecutorSettings
from lmmbench.executors.jobs import Job, RowResult, execute_job
from lmmbench.executors.pool import Slot, SlotSet, WorkerPool, hold_slots, make_slots

__all__ = ["InProcessExecutor", "worker_argv"]


def worker_argv(python: str, job_path: Path) -> list[str]:
    """The command that runs one job file with interpreter ``python``."""
    return [python, "-m", "lmmbench.executors.worker", str(job_path)]


class InProcessExecutor:
    """Runs every row in this process, one at a time: in plan order, or under a plan's schedule the first row
    whose needs have ended."""

    staged = True  # takes every row of a plan at once; each starts when the schedule says its needs ended

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Run each job with ``execute_job`` here (the driver's main thread); a row cut short by a stop signal
        ends the plan (KeyboardInterrupt: the rows after it are not started). In a plan that mixes executors a
        row holds slots of the plan's one local pool while it runs (``executors.schedule``)."""
        from lmmbench.executors.schedule import SCHEDULE

        schedule = SCHEDULE.get()
        if schedule is None:
            for job in jobs:
                self._one(job, done)
            return
        slots = schedule.machine(self._slots)
        waiting = list(jobs)
        while waiting:
            ready, waiting = schedule.take(waiting, most=1)
            if not ready:
                schedule.pause()
                continue
            held = hold_slots(slots, ready[0]) if slots is not None else []
            if isinstance(held, RowResult):
                done(held)
                continue
            try:
                self._one(ready[0], done)
            finally:
                if slots is not None:
                    slots.give(held)

    def _slots(self) -> SlotSet:
        from lmmbench.executors.gpus import discover_gpus

        return SlotSet(make_slots(self.settings.workers, discover_gpus()))

    @staticmethod
    def _one(job: Job, done: DoneCallback) -> None:
        result = execute_job(job)
        done(result)
        if result.status == "interrupted":
            raise KeyboardInterrupt


def _subprocess_launcher(job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
    return worker_argv(sys.executable, job_path), {}


def _subprocess(settings: ExecutorSettings) -> Executor:
    return WorkerPool(settings, _subprocess_launcher)


EXECUTORS.add("inprocess", InProcessExecutor)
EXECUTORS.add("subprocess", _subprocess)
