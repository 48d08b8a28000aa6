"""The executor interface and its registry (``EXECUTORS``, entry-point group ``lmmbench.executors``).

An executor factory takes ``ExecutorSettings`` and returns an object with
``run(jobs, done)``: it runs every job somewhere and calls ``done(result)`` once per job, as each
finishes (the plan writes the row's status at once). Third-party executors register a factory
under the entry-point group ``lmmbench.executors``. In a plan, ``run`` gets the rows whose needs have ended, in
batches; an executor whose class sets ``staged = True`` gets all its rows at once and asks the plan's schedule
(``executors.schedule.SCHEDULE``) when each may start, as the built-in ones do. Optional methods, called by the
plan in the driver's main thread: ``prepare(jobs, done)`` (checks before any row runs; returns the rows that can
run), ``start()`` (join what the rows need; ``UserError`` fails them), ``cleanup()`` (at the plan's end); and
``stop(signum)``, from any thread, where the executor stops its rows itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lmmbench.core.registry import Registry
from lmmbench.executors.jobs import Job, RowResult

__all__ = ["EXECUTORS", "DoneCallback", "Executor", "ExecutorFactory", "ExecutorSettings"]

DoneCallback = Callable[[RowResult], None]


@dataclass(frozen=True)
class ExecutorSettings:
    """Plan-wide settings every executor may read."""

    plan_dir: Path
    workers: int = 1
    max_retries: int = 2
    ray_address: str | None = None
    constraints: Path | None = None  # pip constraints for venv / container installs


class Executor(Protocol):
    """Runs jobs and reports each result through ``done``."""

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Run every job; call ``done`` once per job."""


ExecutorFactory = Callable[[ExecutorSettings], Executor]
EXECUTORS: Registry[ExecutorFactory] = Registry("executors")
