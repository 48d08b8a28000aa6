"""The local worker pool: one process per run, one GPU per worker (or CPU slots), crash retries.

A slot is a GPU (``CUDA_VISIBLE_DEVICES`` set to it) or, on a machine without GPUs, one of
``workers`` CPU slots. Each job gets a fresh process started by a *launcher* (a plain interpreter,
a venv's interpreter, a container engine); the job is written to ``<row>/job.json`` and the worker
writes ``<row>/result.json``. A worker that exits without a result (crashed, killed, OOM) is
started again, up to ``max_retries`` times, then the row fails with the tail of its log. While a
worker runs on a GPU, the GPU is sampled through NVML when NVML is there.

Each worker leads its own process group and dies with the driver (``core.children``). When the driver is
stopped (SIGTERM, Ctrl-C) while rows run, ``run`` passes the signal to every worker's group at once, gives them
the ``stop_grace_s`` limit to write what they measured (a row cut short says ``interrupted``), kills what is
left, starts nothing more, and raises the interruption again.

A timing row (``perf``, or a spec's ``run``) gets the machine: it takes every slot, so it runs alone
(with only its own serve row, which the plan runs beside the pool); other rows share the slots. A row's
``num_cpus`` is the number of CPU slots it holds (rounded up; at least one), so a ``num_cpus: 2`` row
never runs beside another row on a 2-slot pool; on a GPU pool it holds ``num_gpus`` GPU slots (at least
one), all of them in its ``CUDA_VISIBLE_DEVICES`` (NVML samples the first). A row that asks for more
slots than the pool has fails alone, with the cause.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lmmbench.core.children import start_group, stop_groups
from lmmbench.core.errors import UserError
from lmmbench.executors.base import DoneCallback, ExecutorSettings
from lmmbench.executors.gpus import GpuInfo, GpuSampler, discover_gpus, load_nvml
from lmmbench.executors.jobs import Job, RowResult, is_timing

__all__ = ["Launcher", "Slot", "SlotSet", "WorkerPool", "hold_slots", "interrupted_result", "make_slots",
           "slots_needed"]

JOB_NAME = "job.json"
RESULT_NAME = "result.json"


@dataclass(frozen=True)
class Slot:
    """Where a worker runs: a GPU, or a CPU slot (``gpu`` is None)."""

    index: int
    gpu: GpuInfo | None = None
    more: tuple[GpuInfo, ...] = ()  # the other GPUs of a row that holds several (num_gpus > 1)

    def env(self) -> dict[str, str]:
        """Environment a worker on this slot gets."""
        if self.gpu is None:
            return {}
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in (self.gpu, *self.more))}


# (job, its job file, the slot) -> (argv, extra environment)
Launcher = Callable[[Job, Path, Slot], tuple[list[str], dict[str, str]]]


def make_slots(workers: int, gpus: list[GpuInfo]) -> list[Slot]:
    """One slot per GPU when there are GPUs, else ``workers`` CPU slots."""
    if gpus:
        return [Slot(i, g) for i, g in enumerate(gpus)]
    return [Slot(i) for i in range(max(1, workers))]


def slots_needed(job: Job, gpu: bool) -> int:
    """The slots a row holds on the local pool: ``num_gpus`` GPU slots on a GPU pool, else ``num_cpus`` CPU
    slots; rounded up, at least one."""
    return max(1, math.ceil(job.num_gpus if gpu else job.num_cpus))


def _too_big(job: Job, count: int, total: int, gpu: bool) -> RowResult:
    field = "num_gpus" if gpu else "num_cpus"
    return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                     error=f"{field}: the row needs {count} slots of the local pool, which has {total} "
                           "(raise the plan's workers, or lower the row's request)")  # fmt: skip


def _log_tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def _exit_code(crash: str) -> int | None:
    """The exit code in a crash note (``attempt N: exit code C``), None when there is none."""
    head, _, code = crash.rpartition("exit code ")
    try:
        return int(code) if head else None
    except ValueError:
        return None


def interrupted_result(job: Job, error: str) -> RowResult:
    """The result of a row stopped by a signal before it wrote one of its own (nothing measured kept)."""
    now = time.time()
    return RowResult(name=job.name, kind=job.kind, status="interrupted", executor=job.executor, model=job.model,
                     error=error, ended_at_s=now)


class SlotSet:
    """The free slots. A timing row takes all of them at once; while one waits, no other row takes a slot
    (so it is not starved by rows that keep taking the slot it waits for)."""

    def __init__(self, slots: list[Slot]) -> None:
        self.free = list(slots)
        self.total = len(slots)
        self.gpu = bool(slots and slots[0].gpu is not None)  # GPU slots (num_gpus counts), else CPU slots
        self.cv = threading.Condition()
        self.timing_waiting = 0

    def take(self, whole: bool, count: int = 1) -> list[Slot]:
        """``count`` free slots, or with ``whole`` every slot; blocks until they are free. A row waiting for
        several slots is not starved either: while it waits, no other row takes one."""
        with self.cv:
            if whole or count > 1:
                count = self.total if whole else count
                self.timing_waiting += 1
                try:  # an interruption while it waits (the driver's main thread) leaves no waiter behind
                    self.cv.wait_for(lambda: len(self.free) >= count)
                finally:
                    self.timing_waiting -= 1
                held, self.free = self.free[:count], self.free[count:]
                return held
            self.cv.wait_for(lambda: bool(self.free) and not self.timing_waiting)
            return [self.free.pop(0)]

    def give(self, held: list[Slot]) -> None:
        """Return slots taken with ``take``."""
        with self.cv:
            self.free += held
            self.cv.notify_all()


def hold_slots(slots: SlotSet, job: Job) -> list[Slot] | RowResult:
    """The slots ``job`` holds while it runs (see the module docstring), taken from ``slots`` (blocks until they
    are free); a failed result when it asks for more than there are."""
    count = slots_needed(job, slots.gpu)
    if count > slots.total:
        return _too_big(job, count, slots.total, slots.gpu)
    return slots.take(whole=is_timing(job), count=count)


class WorkerPool:
    """Runs jobs on a pool of slots, one process per job, with crash retries."""

    staged = True  # takes every row of a plan at once; each starts when the schedule says its needs ended

    def __init__(self, settings: ExecutorSettings, launcher: Launcher, slots: list[Slot] | None = None,
                 nvml: Any | None = None, final_codes: dict[int, str] | None = None,
                 after_gate: Callable[[Job], Job] | None = None) -> None:  # fmt: skip
        self.settings = settings
        self.launcher = launcher
        self.after_gate = after_gate  # what the executor makes of a job once its needs ended (container paths)
        # exit codes of the launcher itself (a container engine's 125 / 126 / 127): the row fails at once, with
        # the launcher's last line, never retried as a crash of the worker
        self.final_codes = final_codes or {}
        self.nvml = nvml if nvml is not None else load_nvml()
        self.slots = slots if slots is not None else make_slots(settings.workers, discover_gpus(self.nvml))
        self._lock = threading.Lock()
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._stopped_by: int | None = None  # the signal that stopped the pool: nothing more starts

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Run every job on the first free slot; ``done`` is called from the pool's threads. Under a plan's
        schedule (``executors.schedule``) every job gets a thread and waits there for its needs, holding no slot,
        and a stop of the plan stops the pool. An interruption (or any exception) of this thread stops every
        worker (see the module docstring) and is raised again."""
        from lmmbench.executors.schedule import SCHEDULE

        schedule = SCHEDULE.get()
        slots = SlotSet(self.slots)
        if schedule is not None:
            slots = schedule.machine(lambda: slots) or slots  # a mixed plan's local executors share one set
            schedule.on_stop(self.stop)

        def one(job: Job) -> None:
            if schedule is not None:
                waited = schedule.wait(job, lambda: self._stopped_by is not None)
                if waited is None:
                    return
                job = waited
            if self.after_gate is not None:
                try:
                    job = self.after_gate(job)
                except UserError as exc:
                    done(RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor,
                                   model=job.model, error=str(exc)))
                    return
            held = hold_slots(slots, job)
            if isinstance(held, RowResult):
                done(held)
                return
            if self._stopped_by is not None:  # stopped while it waited for slots: not started (the plan says so)
                slots.give(held)
                return
            count = slots_needed(job, slots.gpu)  # a timing row holds every slot but sees the GPUs it asked for
            slot = replace(held[0], more=tuple(s.gpu for s in held[1:count] if s.gpu is not None))
            try:
                done(self._run_with_retries(job, slot))
            finally:
                slots.give(held)

        threads = max(1, len(jobs)) if schedule is not None else len(self.slots)  # a waiting row holds no slot
        ex = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="plan-worker")
        try:
            for fut in [ex.submit(one, j) for j in jobs]:
                fut.result()
        except BaseException:
            from lmmbench.core.signals import stop_signal

            self.stop(stop_signal())
            ex.shutdown(wait=True, cancel_futures=True)  # rows not started stay unreported: the plan says so
            raise
        ex.shutdown(wait=True)

    def stop(self, signum: int) -> None:
        """Start nothing more; ``signum`` to every running worker's group, SIGKILL after ``stop_grace_s``."""
        from lmmbench.config.limits import limit_value

        with self._lock:
            self._stopped_by = signum
            running = list(self._running.values())
        stop_groups(running, signum, float(limit_value("stop_grace_s")))

    def _run_with_retries(self, job: Job, slot: Slot) -> RowResult:
        row_dir = Path(job.row_dir)
        row_dir.mkdir(parents=True, exist_ok=True)
        job_path = row_dir / JOB_NAME
        job_path.write_text(json.dumps(job.model_copy(update={"row_dir": "."}).model_dump(mode="json"), indent=2),
                            encoding="utf-8")  # relative: the worker resolves it against the job file's folder
        crashes: list[str] = []
        for attempt in range(1, self.settings.max_retries + 2):
            result, crash = self._attempt(job, job_path, slot, attempt)
            if result is not None:
                return result.model_copy(update={"attempts": attempt})
            if self._stopped_by is not None:  # stopped, not crashed: never retried
                log = row_dir / f"worker-attempt{attempt}.log"
                what = "before it started" if not crash else f"before it wrote a result ({crash}); log {log}"
                return interrupted_result(job, f"stopped by signal {self._stopped_by} {what}").model_copy(
                    update={"attempts": attempt})
            crashes.append(crash)
            code = _exit_code(crash)
            if code in self.final_codes:
                log = row_dir / f"worker-attempt{attempt}.log"
                return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor,
                                 model=job.model, attempts=attempt,
                                 error=f"{self.final_codes[code]} (exit code {code}): {_log_tail(log, 1)}; "
                                       f"log {log}")  # fmt: skip
        log = row_dir / f"worker-attempt{len(crashes)}.log"
        return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                         attempts=len(crashes),
                         error=f"worker crashed {len(crashes)} times ({'; '.join(crashes)}); log {log}: "
                               f"{_log_tail(log)}")  # fmt: skip

    def _attempt(self, job: Job, job_path: Path, slot: Slot, attempt: int) -> tuple[RowResult | None, str]:
        result_path = job_path.parent / RESULT_NAME
        result_path.unlink(missing_ok=True)
        argv, env = self.launcher(job, job_path, slot)
        log_path = job_path.parent / f"worker-attempt{attempt}.log"
        with self._lock:  # started under the lock: a stop either sees this worker or keeps it from starting
            if self._stopped_by is not None:
                return None, ""
            with log_path.open("wb") as log:
                proc = start_group(argv, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **slot.env(), **env})  # fmt: skip
            self._running[proc.pid] = proc
        (job_path.parent / f"attempt{attempt}.pid").write_text(str(proc.pid), encoding="utf-8")
        sampler = GpuSampler(self.nvml, slot.gpu.index).start() if self.nvml and slot.gpu else None
        try:
            code = proc.wait()
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
        gpu = sampler.stop() if sampler else {}
        if result_path.is_file():
            result = RowResult.model_validate_json(result_path.read_text(encoding="utf-8"))
            return result.model_copy(update={"metrics": {**result.metrics, **gpu}}), ""
        return None, f"attempt {attempt}: exit code {code}"
