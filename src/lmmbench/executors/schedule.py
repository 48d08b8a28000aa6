"""Running a plan's rows by their ``needs`` (see ``executors.stages``): one schedule for every executor. A row
starts as soon as every row it needs has ended and a slot of its executor is free, whatever else still runs; a
row whose needs did not all succeed is finished as skipped, naming the row.

Every executor gets all its rows at once and runs them at the same time as the other executors: the built-in
ones (``staged``: the local pool's ``subprocess``, ``venv``, ``container``; ``inprocess``; ``ray``) ask the
``Schedule`` (``SCHEDULE``) for each row once its needs have ended. A third-party executor without ``staged``
gets its rows in batches: each call of its ``run`` gets the rows whose needs have ended.

Threads and signals: ``inprocess`` rows run in the driver's main thread (a run there installs its own stop
handlers, which only the main thread can), or, in a plan without them, a third-party executor's rows (it may run
them in the driver too); every other executor runs in a thread of its own (Ray joins its cluster before, in the
main thread: ``start``). A stop signal
(SIGINT, or SIGTERM raised as an interruption) arrives in the main thread, which stops every executor through
the schedule (each pool signals its workers' groups, Ray cancels its tasks), waits for them to report their rows
and raises the interruption again; nothing more starts.

A plan that mixes executors keeps ``workers`` as the size of the one local pool: its local executors
(``subprocess``, ``venv``, ``container``, ``inprocess``) share one set of slots (``Schedule.machine``), so a timing
row still takes the whole machine. Ray rows are placed by Ray on its cluster, beside the local rows.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from lmmbench.executors.jobs import Job, RowResult

__all__ = ["SCHEDULE", "Schedule", "run_in_stages", "skipped_by"]

T = TypeVar("T")
SCHEDULE: contextvars.ContextVar[Schedule | None] = contextvars.ContextVar("lmmbench_schedule", default=None)
_PAUSE_S = 0.2  # the longest a waiting loop sleeps before it looks again (it wakes at once when a row ends)
_WAIT_S = 1.0  # the same for a row waiting for its needs in a pool's thread (one thread per row: fewer wake-ups)


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


class Schedule:
    """The plan's rows as the executors see them: which have ended, which may start, the stop of all."""

    def __init__(self, jobs: list[Job], done: dict[str, RowResult], finish: Callable[[RowResult], None],
                 refresh: Callable[[list[Job]], list[Job]], shared: bool) -> None:  # fmt: skip
        self._names = {j.name for j in jobs}
        self._done = done
        self._finish = finish
        self._refresh = refresh
        self._shared = shared  # several executors: the local ones share one set of slots
        self._machine: Any = None
        self._cv = threading.Condition()
        self._stoppers: list[Callable[[int], None]] = []
        self.stopped_by: int | None = None  # the signal that stopped the plan: nothing more starts

    def finished(self, result: RowResult) -> None:
        """The ``done`` callback of every executor: the row's result recorded, the waiting rows woken."""
        self._finish(result)
        with self._cv:
            self._cv.notify_all()

    def ended(self, job: Job) -> bool:
        """Every row ``job`` needs has ended (a need that is no row of this run ended before it)."""
        return all(n in self._done or n not in self._names for n in job.needs)

    def take(self, waiting: list[Job], most: int | None = None) -> tuple[list[Job], list[Job]]:
        """The rows of ``waiting`` whose needs have ended, in plan order (at most ``most``), their hand-off filled
        in, and the rows still waiting. A row whose needs did not all succeed is finished as skipped."""
        ready: list[Job] = []
        still: list[Job] = []
        for job in waiting:
            if (most is not None and len(ready) >= most) or not self.ended(job):
                still.append(job)
            elif (cause := skipped_by(job.needs, self._done)) is not None:
                self.finished(_skip(job, cause))
            else:
                ready.append(job)
        return (self._refresh(ready) if ready else []), still

    def wait(self, job: Job, stopped: Callable[[], bool]) -> Job | None:
        """Block until ``job``'s needs have ended: the job to run (hand-off filled in), or None when it is not to
        run (skipped, already reported; or the plan or its executor was stopped)."""
        with self._cv:
            while not self.ended(job) and not (stopped() or self.stopped_by is not None):
                self._cv.wait(_WAIT_S)
        if stopped() or self.stopped_by is not None:
            return None
        ready, _ = self.take([job])
        return ready[0] if ready else None

    def pause(self) -> None:
        """Sleep until a row ends (or ``_PAUSE_S``)."""
        with self._cv:
            self._cv.wait(_PAUSE_S)

    def machine(self, make: Callable[[], T]) -> T | None:
        """The local slots every local executor of a mixed plan shares (made by the first that asks); None when
        the plan runs on one executor (its own slots)."""
        if not self._shared:
            return None
        with self._cv:
            if self._machine is None:
                self._machine = make()
            return self._machine  # type: ignore[no-any-return]

    def on_stop(self, stop: Callable[[int], None]) -> None:
        """Call ``stop(signum)`` when the plan is stopped (at once if it was already)."""
        with self._cv:
            self._stoppers.append(stop)
            signum = self.stopped_by
        if signum is not None:
            stop(signum)

    def stop(self, signum: int) -> None:
        """Start nothing more; stop every executor that asked (``on_stop``)."""
        with self._cv:
            self.stopped_by = signum
            stoppers = list(self._stoppers)
            self._cv.notify_all()
        for stop in stoppers:
            stop(signum)


def _in_batches(schedule: Schedule, jobs: list[Job], run: Callable[[list[Job]], None]) -> None:
    """A third-party executor (not ``staged``): each call of its ``run`` gets the rows whose needs have ended."""
    waiting = list(jobs)
    while waiting and schedule.stopped_by is None:
        ready, waiting = schedule.take(waiting)
        if ready:
            run(ready)
        elif waiting:
            schedule.pause()


def run_in_stages(jobs: list[Job], done: dict[str, RowResult], finish: Callable[[RowResult], None],
                  refresh: Callable[[list[Job]], list[Job]], executors: dict[str, Any],
                  run_group: Callable[[str, list[Job], Callable[[RowResult], None]], None]) -> None:  # fmt: skip
    """Run ``jobs`` (see the module docstring): ``run_group(executor name, rows, done)`` runs rows on one executor;
    ``refresh`` re-resolves rows (their hand-off filled in from the results so far) just before they run. A stop
    signal (KeyboardInterrupt in the main thread) stops every executor, waits for them, and is raised again."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.executor, []).append(job)
    schedule = Schedule(jobs, done, finish, refresh, shared=len(groups) > 1)

    def one(name: str) -> None:
        if getattr(executors[name], "staged", False):
            run_group(name, groups[name], schedule.finished)
        else:
            if callable(stop := getattr(executors[name], "stop", None)):
                schedule.on_stop(stop)
            _in_batches(schedule, groups[name], lambda ready: run_group(name, ready, schedule.finished))

    # the driver's main thread: inprocess rows (their runs install their own stop handlers), else a third-party
    # executor's, which may run rows in the driver as well
    main = "inprocess" if "inprocess" in groups else next(
        (n for n in groups if not getattr(executors[n], "staged", False)), None)
    token = SCHEDULE.set(schedule)
    try:
        threads = [_Thread(name, contextvars.copy_context(), one) for name in groups if name != main]
        try:
            if main is not None:
                one(main)
            for thread in threads:
                thread.join_interruptibly()
        except BaseException:
            from lmmbench.core.signals import stop_signal

            schedule.stop(stop_signal())
            for thread in threads:
                thread.join_interruptibly()
            raise
        for thread in threads:
            thread.raise_error()
    finally:
        SCHEDULE.reset(token)


class _Thread:
    """One executor's rows in a thread of their own (with the schedule in its context); an error it raises is
    raised again in the main thread."""

    def __init__(self, name: str, context: contextvars.Context, one: Callable[[str], None]) -> None:
        self.error: BaseException | None = None
        self.ended = threading.Event()

        def target() -> None:
            try:
                context.run(one, name)
            except BaseException as exc:  # raised again in the main thread (raise_error)
                self.error = exc
            finally:
                self.ended.set()

        threading.Thread(target=target, name=f"plan-{name}", daemon=True).start()

    def join_interruptibly(self) -> None:
        """Wait until the thread's rows are done, in short waits (a signal is seen meanwhile). Not
        ``Thread.join``: a signal raised in it marks a running thread as stopped (CPython 3.11's
        ``_wait_for_tstate_lock``), so a second join would return at once."""
        while not self.ended.wait(_PAUSE_S):
            pass

    def raise_error(self) -> None:
        """Raise what the thread raised, if anything."""
        if self.error is not None:
            raise self.error
