"""The ``ray`` executor: each row is one Ray task, scheduled by Ray on its own resources.

``num_cpus`` / ``num_gpus`` of a row are the task's resource request; a worker that dies (killed,
OOM, node lost) is retried by Ray itself (``max_retries``), not by lmmbench. ``--ray-address``
joins an existing cluster (``ray://host:10001`` or ``auto``); without it a local cluster starts and
is shut down at the end. Remote machines and pods (Kubernetes through KubeRay, cloud VMs through
``ray up``) are a Ray cluster target: start the cluster there with lmmbench installed on every node
and the plan's ``out_dir`` on a shared filesystem, then pass its address. Each task writes its row
folder where it runs and returns its result, which the driver writes into the row folder.

A timing row (perf, a spec's run) asks for every unit of the ``lmmbench_machine`` resource of a node
(a local cluster gets it; nodes of another cluster get it with ``ray start --resources
'{"lmmbench_machine": 1000}'``), every other row for one unit: so a timing row runs alone on its node,
while other rows share theirs. On a cluster without that resource the rows are placed by CPUs and GPUs
only, and a timing row that ran beside another row says so (``contention`` in its result).

In a plan, the cluster is joined (or started) by ``start``, in the driver's main thread, and ``run`` goes on in a
thread of its own (``executors.schedule``), submitting each row once the rows it needs have ended.
When the driver is stopped (SIGTERM, Ctrl-C), every row still pending is cancelled: a running task gets
Ray's KeyboardInterrupt, which its run takes for Ctrl-C (it writes what it measured; the task writes
``result.json`` in the row folder, read back since Ray answers a cancelled task with an error), and a task
still running after the ``stop_grace_s`` limit is cancelled by force; the rows say ``interrupted``.
A row's ``requirements`` go into its task's ``runtime_env`` (``pip``, installed by Ray on the node with
the project's constraints file, ``-c``, at the same path on every node), so they are importable in that
row's task only. Ray builds such an environment with ``virtualenv``: on a local cluster without it, the
rows with requirements fail before the plan runs, with that cause.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmmbench.executors.base import EXECUTORS, DoneCallback, ExecutorSettings
from lmmbench.executors.jobs import Job, RowResult, execute_job, is_timing, write_result
from lmmbench.executors.pool import RESULT_NAME, interrupted_result

__all__ = ["RayExecutor", "ray_execute", "runtime_env"]


def ray_execute(job_data: dict[str, Any]) -> dict[str, Any]:
    """The body of a row's Ray task: run the job here; a pid file per attempt counts Ray's retries."""
    job = Job.model_validate(job_data)
    row_dir = Path(job.row_dir)
    row_dir.mkdir(parents=True, exist_ok=True)
    (row_dir / f"ray-attempt-{os.getpid()}.pid").write_text(str(os.getpid()), encoding="utf-8")
    result = execute_job(job)
    write_result(result, row_dir / RESULT_NAME)  # read back by the driver when it cancelled the task
    return result.model_dump(mode="json")


def _machine_share(job: Job, machine: bool) -> dict[str, float]:
    """The ``lmmbench_machine`` units a row asks for: all of a node's for a timing row, else one."""
    from lmmbench.loadgen.ray_fanout import MACHINE_RESOURCE, MACHINE_UNITS

    if not machine:
        return {}
    return {MACHINE_RESOURCE: float(MACHINE_UNITS if is_timing(job) else 1)}


def runtime_env(job: Job, constraints: Path | None) -> dict[str, Any]:
    """The task's ``runtime_env``: the row's requirements as Ray's ``pip`` field (none: empty)."""
    if not job.requirements:
        return {}
    if constraints is None:
        from lmmbench.executors.venvs import default_constraints

        constraints = default_constraints()
    options = ["--disable-pip-version-check", "-c", str(Path(constraints).resolve())]
    return {"pip": {"packages": list(job.requirements), "pip_install_options": options}}


def _env_option(job: Job, constraints: Path | None) -> dict[str, Any]:
    env = runtime_env(job, constraints)
    return {"runtime_env": env} if env else {}


class RayExecutor:
    """Submits every row as a Ray task and reports results as they finish."""

    staged = True  # takes every row of a plan at once; each is submitted when the schedule says its needs ended

    def __init__(self, settings: ExecutorSettings) -> None:
        self.settings = settings
        self._started = False  # this plan started (or joined) the Ray cluster: run shuts it down at its end
        self._stopped_by: int | None = None  # the plan was stopped (its schedule): nothing more is submitted

    def prepare(self, jobs: list[Job], done: DoneCallback) -> list[Job]:
        """Before any row runs: on a local cluster (no ``--ray-address``), rows with requirements fail alone when
        ``virtualenv`` (which Ray's pip runtime_env needs) is not installed. Returns the rows that can run."""
        import importlib.util

        self._check_gpus(jobs)
        ready = []
        for job in jobs:
            if (job.requirements and self.settings.ray_address is None
                    and importlib.util.find_spec("virtualenv") is None):  # fmt: skip
                done(RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                               error="requirements: Ray installs them through its pip runtime_env, which needs "
                                     "virtualenv (pip install virtualenv), or run the row on executor: venv"))
            else:
                ready.append(job)
        return ready

    def _check_gpus(self, jobs: list[Job]) -> None:
        """Refuse (before any row runs) a row asking more GPUs than the whole cluster has: Ray would keep it
        pending for ever. The cluster is joined (or started) here; ``run`` leaves it as it found it."""
        wanted = [(j.name, j.num_gpus) for j in jobs if j.num_gpus > 0]
        if not wanted:
            return
        from lmmbench.executors.gpus import check_gpu_requests
        from lmmbench.loadgen.ray_fanout import init_ray

        self._started = init_ray(self.settings.ray_address) or self._started
        import ray

        try:
            check_gpu_requests(wanted, int(ray.cluster_resources().get("GPU", 0)), "the Ray cluster")
        except BaseException:
            if self._started:
                ray.shutdown()
            raise

    def run(self, jobs: list[Job], done: DoneCallback) -> None:
        """Run ``jobs`` as Ray tasks (resources and retries from the plan); under a plan's schedule each is
        submitted once its needs have ended, and a stop of the plan cancels the tasks."""
        from lmmbench.executors.schedule import SCHEDULE
        from lmmbench.loadgen.ray_fanout import init_ray

        started = init_ray(self.settings.ray_address) or self._started
        self._started = False
        schedule = SCHEDULE.get()
        try:
            submit = self._submitter()
            waiting = list(jobs) if schedule is not None else []
            pending = {} if schedule is not None else {submit(j): j for j in jobs}
            if schedule is not None:
                schedule.on_stop(self.stop)
            try:
                while (waiting or pending) and self._stopped_by is None:
                    if waiting and schedule is not None:
                        ready, waiting = schedule.take(waiting)
                        pending.update({submit(j): j for j in ready})
                    self._collect(pending, done, schedule)
            except BaseException:
                self._cancel(pending, done)
                raise
            if pending:  # stopped by the plan's schedule: what runs is cancelled, nothing more submitted
                self._cancel(pending, done)
        finally:
            if started:
                import ray

                ray.shutdown()

    def start(self) -> None:
        """Join (or start) the cluster, in the driver's main thread, before the plan's rows run (``run`` goes on in
        a thread of its own); ``run`` or ``cleanup`` leaves it as it was found."""
        from lmmbench.loadgen.ray_fanout import init_ray

        self._started = init_ray(self.settings.ray_address) or self._started

    def stop(self, signum: int) -> None:
        """Submit nothing more and cancel the pending tasks (``run``, in its own thread, does it)."""
        self._stopped_by = signum

    def cleanup(self) -> None:
        """Shut down the cluster ``prepare`` started (or joined) when ``run`` did not (no row ran)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False

    def _submitter(self) -> Callable[[Job], Any]:
        """A function that submits one job as a Ray task (its resources, retries and runtime_env)."""
        import ray

        from lmmbench.loadgen.ray_fanout import MACHINE_RESOURCE

        machine = bool(ray.cluster_resources().get(MACHINE_RESOURCE))
        remote = ray.remote(ray_execute)

        def submit(j: Job) -> Any:
            return remote.options(num_cpus=j.num_cpus, num_gpus=j.num_gpus, max_retries=self.settings.max_retries,
                                  retry_exceptions=False, resources=_machine_share(j, machine),
                                  **_env_option(j, self.settings.constraints)).remote(j.model_dump(mode="json"))

        return submit

    def _collect(self, pending: dict[Any, Job], done: DoneCallback, schedule: Any) -> None:
        """Report the tasks that ended within a short wait (a signal or a stop is seen meanwhile); with no task
        pending, wait for a row to end instead."""
        import ray

        if not pending:
            if schedule is not None:
                schedule.pause()
            return
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.2)
        for ref in ready:
            done(self._result(pending.pop(ref), ref))

    def _cancel(self, pending: dict[Any, Job], done: DoneCallback) -> None:
        """Cancel every pending task; report each row from what its task wrote (``interrupted``)."""
        import ray

        from lmmbench.config.limits import limit_value

        for ref in pending:
            ray.cancel(ref, force=False)
        refs = list(pending)
        _, late = ray.wait(refs, num_returns=len(refs), timeout=float(limit_value("stop_grace_s")))
        for ref in late:
            ray.cancel(ref, force=True)
        for ref in refs:
            job = pending[ref]
            path = Path(job.row_dir) / RESULT_NAME
            if path.is_file():  # its own account: interrupted, or ok / failed when it ended as the stop came
                done(RowResult.model_validate_json(path.read_text(encoding="utf-8")))
            else:
                done(interrupted_result(job, "cancelled before it wrote a result: the plan was interrupted"))

    def _result(self, job: Job, ref: Any) -> RowResult:
        import ray

        attempts = max(1, len(list(Path(job.row_dir).glob("ray-attempt-*.pid"))))
        try:
            result = RowResult.model_validate(ray.get(ref))
        except Exception as exc:  # the task's worker died more often than max_retries allows
            line = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]
            return RowResult(name=job.name, kind=job.kind, status="failed", executor=job.executor, model=job.model,
                             attempts=attempts, error=f"ray task failed after {attempts} attempt(s): {line}")
        return result.model_copy(update={"attempts": attempts})


EXECUTORS.add("ray", RayExecutor)
