"""The ``container`` executor: each row runs in a container through the docker CLI (or podman's).

``run --rm --network host`` with the row folder mounted at ``/lmmbench/run`` (the job file and the
results), ``$LMMBENCH_HOME`` at ``/lmmbench/home`` (built tiny models, media), the row's ``mounts`` and,
read-only, every host path its options name, rewritten to where the container sees it
(``executors.container_mounts``). The host network lets a container row reach the plan's serve rows
(they bind 127.0.0.1) and any server the host reaches. A row that names no ``image`` runs in the self-contained
image of a wheel of this checkout with the extras of the plan's rows of its kinds, built once and kept (cached by
content); a row's own image without lmmbench gets it layered on from the same wheel, a layer removed with the
plan's built images (``executors.container_lmmbench``). A row with ``requirements`` runs
in an image built from that one with them installed (``executors.container_images``: ``uv pip`` when the
image has uv, else pip), removed once its last row ended. A row's GPUs are given with ``gpu_flags``. The engine
command is ``$LMMBENCH_CONTAINER_ENGINE`` (default ``docker``; ``podman`` works alike). When no engine
answers ``info``, the container rows fail with one line.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from lmmbench.core.errors import UserError
from lmmbench.executors.base import EXECUTORS, DoneCallback, ExecutorSettings
from lmmbench.executors.container_images import ImageBuilder
from lmmbench.executors.container_mounts import Mount, check_mounts, container_paths, host_path
from lmmbench.executors.container_wheel import Wheel
from lmmbench.executors.jobs import Job, RowResult
from lmmbench.executors.pool import Slot, WorkerPool

__all__ = ["ContainerExecutor", "engine_command"]

RUN_MOUNT = "/lmmbench/run"
# docker / podman run's own failures (not the row's): 125 the engine's error, 126 the command cannot run, 127 no
# such command in the image; such a row fails once with the engine's line, never retried as a worker crash
ENGINE_EXIT_CODES = {125: "the container engine failed to run the row", 126: "the container's command cannot run",
                     127: "the container's command was not found in the image"}
HOME_MOUNT = "/lmmbench/home"
_NAMED_PATHS = {"model", "tokenizer", "tasks"}  # text fields that may name a host path


def engine_command() -> list[str]:
    """The container engine's command line (``$LMMBENCH_CONTAINER_ENGINE``, default ``docker``)."""
    return shlex.split(os.environ.get("LMMBENCH_CONTAINER_ENGINE", "docker"))


def check_engine(engine: list[str]) -> None:
    """One line and no traceback when no container engine is reachable."""
    try:
        # 300 s: podman answers `info` only when its storage is free, and a commit of a large image layer (a build
        # under way beside this plan) holds it for a minute or more; an engine that is not there answers at once
        proc = subprocess.run([*engine, "info"], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"container executor: no container engine reachable ({engine[0]}: {exc}); start Docker "
                        "or set LMMBENCH_CONTAINER_ENGINE, or pick another executor") from None
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"container executor: no container engine reachable (`{' '.join(engine)} info`: "
                        f"{last[0]}); start Docker or pick another executor")


def gpu_flags(engine: list[str], gpus: list[int]) -> list[str]:
    """The flags that give a container ``gpus``: docker's ``--gpus device=N[,M]``; podman's CDI devices
    (``--device nvidia.com/gpu=N``, from the NVIDIA container toolkit's CDI spec; podman 4 has no ``--gpus``)."""
    if not gpus:
        return []
    if Path(engine[0]).name == "podman":
        return [a for g in gpus for a in ("--device", f"nvidia.com/gpu={g}")]
    devices = ",".join(map(str, gpus))
    return ["--gpus", f"device={devices}" if len(gpus) == 1 else f'"device={devices}"']  # docker's CSV quoting


def path_fields(job: Job) -> set[str]:
    """The option fields of ``job``'s kind typed as paths, and the text fields that may name one."""
    from lmmbench.executors.jobs import config_model

    try:
        model = config_model(job.kind, job.spec)
    except Exception:  # a plugin spec installed inside the container: only the named fields
        return set(_NAMED_PATHS)
    typed = {name for name, f in model.model_fields.items() if "Path" in str(f.annotation)}
    return typed | _NAMED_PATHS


def _failed(job: Job, error: str) -> RowResult:
    return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                     error=error)


class ContainerExecutor:
    """Runs every row in a container of its ``image`` through the worker pool."""

    staged = True  # its pool takes every row at once; each starts when the plan's schedule says its needs ended

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self.engine = engine_command()
        self.engine_checked = False
        self.images = ImageBuilder(self.engine)
        self.run_image: dict[str, str] = {}  # row -> the image it runs (its own, or the one built for it)
        self.extras: dict[str, set[str]] = {}  # image a row names ("" none) -> the extras of the rows that name it
        self.with_lmmbench: dict[str, str] = {}  # image a row names -> the image with lmmbench (itself, or built)
        self.image_failed: dict[str, str] = {}  # image a row names -> why no image with lmmbench could be had
        self.wheel: Wheel | None = None
        self.mounts: dict[str, list[Mount]] = {}  # row -> every mount beside the row folder and home

    def _fixed(self, job: Job) -> list[Mount]:
        from lmmbench.models.tiny import lmmbench_home

        home = lmmbench_home().absolute()
        home.mkdir(parents=True, exist_ok=True)  # an engine refuses to mount a missing folder
        return [Mount(Path(job.row_dir).absolute(), RUN_MOUNT, False), Mount(home, HOME_MOUNT, False),
                *check_mounts(job.mounts)]  # fmt: skip

    def _in_container(self, job: Job) -> Job:
        """``job`` with its host paths rewritten to the container's; its mounts kept for the launch."""
        fixed = self._fixed(job)
        config, added = container_paths(job.config, fixed, path_fields(job), self.settings.plan_dir.absolute())
        self.mounts[job.name] = [*fixed[2:], *added]
        return job.model_copy(update={"config": config})

    def _launch(self, job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
        # the image's own ENTRYPOINT cleared (a vLLM or SGLang image's would get `sh -c ...` as its arguments)
        argv = [*self.engine, "run", "--rm", "--network", "host", "--entrypoint", "", "-v",
                f"{job_path.parent}:{RUN_MOUNT}", "-v", f"{self._fixed(job)[1].host}:{HOME_MOUNT}", "-e",
                f"LMMBENCH_HOME={HOME_MOUNT}", "-w", RUN_MOUNT]  # fmt: skip
        for mount in self.mounts.get(job.name, []):
            argv += ["-v", mount.flag()]
        argv += gpu_flags(self.engine, [g.index for g in (slot.gpu, *slot.more) if g is not None])
        inner = f"python -m lmmbench.executors.worker {RUN_MOUNT}/{job_path.name}"
        return [*argv, self.run_image[job.name], "sh", "-c", inner], {}

    def _constraints(self) -> Path:
        from lmmbench.executors.venvs import default_constraints

        return (self.settings.constraints or default_constraints()).absolute()

    def _lmmbench_image(self, job: Job) -> str:
        """The image with lmmbench that ``job`` runs from (before its requirements): the self-contained one when it
        names no image, else its own, with lmmbench layered on when it lacks it."""
        from lmmbench.executors.container_lmmbench import build_image, layer_lmmbench, probe
        from lmmbench.executors.container_wheel import KIND_EXTRAS, lmmbench_wheel, reduce_extras

        image, key = job.image or "", f"{job.image or ''}|{job.python or ''}"
        if key in self.with_lmmbench:
            return self.with_lmmbench[key]
        if key in self.image_failed:
            raise UserError(self.image_failed[key])
        extras = self.extras.get(image) or set(KIND_EXTRAS.get(job.kind, ()))
        try:
            found = None
            if image:
                self.images.present(image)
                found = probe(self.engine, image)
                has = ".".join((found.python or "").split(".")[:2])
                if job.python and found.python and has != job.python:
                    raise UserError(f"python: the row asks for Python {job.python}; image {image} has {has} (name "
                                    "no image to get one of the version asked for, or drop python)")  # fmt: skip
            if found is not None and found.lmmbench is not None:
                tag = image
            else:
                wheel = self.wheel = self.wheel or lmmbench_wheel()
                wanted = reduce_extras(wheel, extras)
                if found is None:
                    tag = build_image(self.engine, wheel, wanted, self._constraints(), python=job.python)
                else:
                    tag = self.images.adopt(lambda: layer_lmmbench(self.engine, image, found, wheel, wanted,
                                                                   self._constraints()))  # fmt: skip
        except UserError as exc:
            self.image_failed[key] = str(exc)
            raise
        self.with_lmmbench[key] = tag
        return tag

    def _setup(self, job: Job) -> None:
        """The image ``job`` runs: the one with lmmbench, or (with requirements) one built from it with them
        installed."""
        image = self._lmmbench_image(job)
        if not job.requirements:
            self.run_image[job.name] = image
            return
        reqs, added = container_paths({"requirements": job.requirements}, [], set())
        mounts = [m.flag() for m in (*check_mounts(job.mounts), *added)]  # the row's environment, its wheels
        self.run_image[job.name] = self.images.build(image, reqs["requirements"], self._constraints(), mounts)

    def prepare(self, jobs: list[Job], done: DoneCallback) -> list[Job]:
        """Before any row of the plan runs: with no engine reachable every container row fails with that cause
        (the plan's other rows still run); the images rows need are built: the self-contained one, lmmbench layered
        on a row's image that lacks it, the rows' requirements (a failed build fails the rows that need it)."""
        from lmmbench.executors.container_wheel import KIND_EXTRAS

        ready = list(jobs)
        for job in ready:
            self.extras.setdefault(job.image or "", set()).update(KIND_EXTRAS.get(job.kind, ()))
        try:
            if ready:
                check_engine(self.engine)
                self.engine_checked = True
        except UserError as exc:
            for job in ready:
                done(_failed(job, str(exc)))
            return []
        built = []
        for job in ready:
            try:
                self._setup(job)
                built.append(job)
            except UserError as exc:
                done(_failed(job, str(exc)))
        return built

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Check the engine once, then run the rows."""
        if not self.engine_checked:
            check_engine(self.engine)
            self.engine_checked = True
        from lmmbench.executors.schedule import SCHEDULE

        gated = SCHEDULE.get() is not None  # a row's paths are rewritten once its needs ended (hand-off filled)
        ready = []
        for job in jobs:
            try:
                if job.name not in self.run_image:
                    self._setup(job)
                ready.append(job if gated else self._in_container(job))
            except UserError as exc:
                done(_failed(job, str(exc)))
        users: dict[str, int] = {}
        for job in ready:
            users[self.run_image[job.name]] = users.get(self.run_image[job.name], 0) + 1
        lock = threading.Lock()

        def finished(result: RowResult) -> None:  # a built image goes when the last row that runs from it ends
            if result.folder:  # the folder as the host sees it: status, summary, reports and hand-offs read it
                mounts = [*self._fixed(next(j for j in ready if j.name == result.name))[:2],
                          *self.mounts.get(result.name, [])]  # fmt: skip
                result = result.model_copy(update={"folder": host_path(result.folder, mounts)})
            done(result)
            with lock:
                tag = self.run_image.get(result.name, "")
                users[tag] = users.get(tag, 1) - 1
                line = self.images.remove(tag) if users[tag] == 0 else None
            if line is not None:
                print(f"warning: {line}", file=sys.stderr)

        WorkerPool(self.settings, self._launch, final_codes=ENGINE_EXIT_CODES,
                   after_gate=self._in_container if gated else None).run(ready, finished)

    def cleanup(self) -> None:
        """The orchestration design's ``cleanup()``: remove the images this plan built (said on stderr when
        one cannot be removed; the plan's results stand)."""
        for line in self.images.cleanup():
            print(f"warning: {line}", file=sys.stderr)


EXECUTORS.add("container", ContainerExecutor)
