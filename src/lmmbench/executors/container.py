"""The ``container`` executor: each row runs in a container through the docker CLI.

``docker run --rm`` with the row folder mounted at ``/lmmbench/run`` (the job file and the results)
and ``$LMMBENCH_HOME`` at ``/lmmbench/home`` (built tiny models, media). The image must hold
lmmbench (e.g. ``pip install -c constraints.txt 'lmmbench[all]'``); a row's requirements are installed
just in time inside the container, with the project's constraints file mounted read-only. A GPU
slot adds ``--gpus device=N``. The engine command is ``$LMMBENCH_CONTAINER_ENGINE`` (default
``docker``; ``podman`` works alike). When no engine answers ``info``, the plan stops with one line.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from lmmbench.core.errors import UserError
from lmmbench.executors.base import EXECUTORS, DoneCallback, ExecutorSettings
from lmmbench.executors.jobs import Job, RowResult
from lmmbench.executors.pool import Slot, WorkerPool

__all__ = ["ContainerExecutor", "engine_command"]

RUN_MOUNT = "/lmmbench/run"
HOME_MOUNT = "/lmmbench/home"
CONSTRAINTS_MOUNT = "/lmmbench/constraints.txt"


def engine_command() -> list[str]:
    """The container engine's command line (``$LMMBENCH_CONTAINER_ENGINE``, default ``docker``)."""
    return shlex.split(os.environ.get("LMMBENCH_CONTAINER_ENGINE", "docker"))


def check_engine(engine: list[str]) -> None:
    """One line and no traceback when no container engine is reachable."""
    try:
        proc = subprocess.run([*engine, "info"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"container executor: no container engine reachable ({engine[0]}: {exc}); start Docker "
                        "or set LMMBENCH_CONTAINER_ENGINE, or pick another executor") from None
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"container executor: no container engine reachable (`{' '.join(engine)} info`: "
                        f"{last[0]}); start Docker or pick another executor")


class ContainerExecutor:
    """Runs every row in a container of its ``image`` through the worker pool."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self.engine = engine_command()
        self.engine_checked = False

    def _launch(self, job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
        from lmmbench.models.tiny import lmmbench_home

        argv = [*self.engine, "run", "--rm", "-v", f"{job_path.parent}:{RUN_MOUNT}", "-v",
                f"{lmmbench_home()}:{HOME_MOUNT}", "-e", f"LMMBENCH_HOME={HOME_MOUNT}", "-w", RUN_MOUNT]  # fmt: skip
        if slot.gpu is not None:
            argv += ["--gpus", f"device={slot.gpu.index}"]
        inner = f"python -m lmmbench.executors.worker {RUN_MOUNT}/{job_path.name}"
        if job.requirements:
            from lmmbench.executors.venvs import default_constraints

            constraints = self.settings.constraints or default_constraints()
            argv += ["-v", f"{constraints}:{CONSTRAINTS_MOUNT}:ro"]
            pip = shlex.join(["python", "-m", "pip", "install", "-q", "-c", CONSTRAINTS_MOUNT, *job.requirements])
            inner = f"{pip} && {inner}"
        return [*argv, job.image or "", "sh", "-c", inner], {}

    def prepare(self, jobs: list[Job], done: DoneCallback) -> list[Job]:
        """Before any row of the plan runs: a row without an image fails alone; with no engine reachable
        every container row fails with that cause (the plan's other rows still run)."""
        ready = []
        for job in jobs:
            if job.image:
                ready.append(job)
            else:
                done(RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor,
                               model=job.model, error="container executor: the row names no image (column 'image')"))
        try:
            if ready:
                check_engine(self.engine)
                self.engine_checked = True
        except UserError as exc:
            for job in ready:
                done(RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor,
                               model=job.model, error=str(exc)))
            return []
        return ready

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Check the engine once, then run the rows; a row without an image is an error."""
        missing = [j.name for j in jobs if not j.image]
        if missing:
            raise UserError(f"container executor: rows {', '.join(missing)} name no image (column 'image')")
        if not self.engine_checked:
            check_engine(self.engine)
        WorkerPool(self.settings, self._launch).run(jobs, done)


EXECUTORS.add("container", ContainerExecutor)
