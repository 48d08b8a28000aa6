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
from lmmbench.executors.jobs import Job, execute_job
from lmmbench.executors.pool import Slot, WorkerPool

__all__ = ["InProcessExecutor", "worker_argv"]


def worker_argv(python: str, job_path: Path) -> list[str]:
    """The command that runs one job file with interpreter ``python``."""
    return [python, "-m", "lmmbench.executors.worker", str(job_path)]


class InProcessExecutor:
    """Runs every row in this process, in plan order."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Run each job with ``execute_job`` here; a row cut short by a stop signal ends the plan
        (KeyboardInterrupt: the rows after it are not started)."""
        for job in jobs:
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
