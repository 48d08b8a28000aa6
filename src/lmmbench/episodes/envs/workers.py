"""Environment steps in worker processes, so a slow simulator does not serialize the ticks.

With ``env_workers=W`` the scheduler builds every environment inside one of ``W`` forked worker
processes (slot ``i`` -> worker ``i % W``) and, each tick, sends every worker the steps of its
slots at once, then collects the results: the workers step in parallel, so a tick with ``N``
slots whose step takes ``S`` takes about ``ceil(N / W) * S`` instead of ``N * S`` (as gymnasium's
``AsyncVectorEnv``). Outcomes do not change: each environment is reset with its episode's seed in
its worker and gets the same actions in the same order. Observations, actions and infos travel pickled
through pipes.

Workers are forked by default (the environment factory is inherited, not pickled). A suite whose simulator
cannot live in a forked child (LIBERO: Mesa's EGL / OSMesa renderer hangs in a process forked after its parent
rendered) asks for ``start_method="spawn"``: each worker is a fresh interpreter that builds and renders its own
scenes, and the factory must pickle (a module-level function or a ``functools.partial`` of one).

A worker that dies (killed, crashed in native code) is noticed when its pipe breaks: every call on it raises
``WorkerDied`` naming the worker, its pid and how it ended (the signal or exit code), the scheduler fails the
episodes of its slots with that cause, and the other workers go on.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from lmmbench.core.clock import now_ns
from lmmbench.core.errors import UserError

__all__ = ["EnvWorkers", "RemoteEnv", "WorkerDied"]


class WorkerDied(RuntimeError):
    """An environment worker process is gone; the message names it and how it ended."""


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        close()


def _serve(conn: Connection, make_env: Callable[[int], Any]) -> None:
    """A worker's loop: build, reset, step, render and close the environments it holds."""
    envs: dict[int, Any] = {}
    while True:
        op, *args = conn.recv()
        try:
            reply: Any = None
            if op == "make":
                envs[args[0]] = make_env(args[1])
            elif op == "reset":
                reply = envs[args[0]].reset(seed=args[1])
            elif op == "step":
                reply = []
                for env_id, action in args[0]:
                    t0 = now_ns()
                    out = envs[env_id].step(action)
                    reply.append((*out, now_ns() - t0))
            elif op == "render":
                reply = envs[args[0]].render()
            elif op == "close":
                _close(envs.pop(args[0], None))
            elif op == "ping":  # answered once the interpreter is up and the factory unpickled
                reply = None
            elif op == "stop":
                for env in envs.values():
                    _close(env)
                conn.send(("ok", None))
                return
            conn.send(("ok", reply))
        except UserError as exc:  # the user's environment raised (custom.UserCodeError): the user's error
            conn.send(("user_error", str(exc)))
        except Exception as exc:  # the environment's own error, reported by the scheduler's process
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class EnvWorkers:
    """``workers`` processes that hold environments (forked, or spawned with ``start_method="spawn"``); see the
    module docstring."""

    def __init__(self, make_env: Callable[[int], Any], workers: int, start_method: str = "fork") -> None:
        if workers < 1:
            raise ValueError("env workers must be >= 1")
        ctx: Any = mp.get_context(start_method)  # fork or spawn: both have Process and Pipe
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._dead: dict[int, str] = {}  # worker -> how it ended
        t0 = now_ns()
        for _ in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, make_env), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._ids = itertools.count()
        self.start_ns = self._wait_ready(t0)

    def _wait_ready(self, t0: int) -> int:
        """Ping every worker at once and wait for all answers: the workers' start-up (a spawned interpreter's
        imports), timed apart from the scenes they build. A worker that died answers nothing; its first real call
        raises ``WorkerDied``."""
        pinged = []
        for worker in range(len(self._conns)):
            with contextlib.suppress(WorkerDied):
                self._send(worker, ("ping",))
                pinged.append(worker)
        for worker in pinged:
            with contextlib.suppress(WorkerDied, RuntimeError, UserError):
                self._answer(worker)
        return now_ns() - t0

    @property
    def pids(self) -> list[int]:
        """The workers' process ids, in worker order."""
        return [int(p.pid) for p in self._procs]

    def _died(self, worker: int) -> WorkerDied:
        """Mark ``worker`` dead and say how it ended."""
        if worker not in self._dead:
            proc = self._procs[worker]
            proc.join(timeout=2)
            code = proc.exitcode
            if code is None:
                how = "stopped answering"
            elif code < 0:
                how = f"was killed by signal {signal.Signals(-code).name}"
            else:
                how = f"exited with code {code}"
            self._dead[worker] = f"environment worker {worker} (pid {proc.pid}) {how}"
        return WorkerDied(self._dead[worker])

    def _send(self, worker: int, msg: tuple[Any, ...]) -> None:
        if worker in self._dead:
            raise self._died(worker)
        try:
            self._conns[worker].send(msg)
        except (OSError, EOFError):
            raise self._died(worker) from None

    def _call(self, worker: int, *msg: Any) -> Any:
        self._send(worker, msg)
        return self._answer(worker)

    def _answer(self, worker: int) -> Any:
        try:
            status, reply = self._conns[worker].recv()
        except (OSError, EOFError):
            raise self._died(worker) from None
        if status == "user_error":
            raise UserError(reply)
        if status != "ok":
            raise RuntimeError(f"environment worker {worker}: {reply}")
        return reply

    def make(self, slot: int, task: int) -> RemoteEnv:
        """A new environment of ``task`` in the worker of ``slot`` (on a dead worker: one whose every call raises
        ``WorkerDied``)."""
        worker, env_id = slot % len(self._conns), next(self._ids)
        with contextlib.suppress(WorkerDied):
            self._call(worker, "make", env_id, task)
        return RemoteEnv(self, worker, env_id)

    def step_many(self, moves: Sequence[tuple[RemoteEnv, Any]]) -> list[tuple[Any, ...] | WorkerDied]:
        """Step every (env, action) pair: all workers at once, each its own envs in order. Each result is
        ``(obs, reward, terminated, truncated, info, step_ns)``, or the ``WorkerDied`` of a worker that is gone."""
        batches: dict[int, list[int]] = {}
        for i, (env, _) in enumerate(moves):
            batches.setdefault(env.worker, []).append(i)
        out: list[tuple[Any, ...] | WorkerDied] = [()] * len(moves)
        sent: list[int] = []
        for worker, idx in batches.items():
            try:
                self._send(worker, ("step", [(moves[i][0].env_id, moves[i][1]) for i in idx]))
                sent.append(worker)
            except WorkerDied as exc:
                for i in idx:
                    out[i] = exc
        for worker in sent:
            idx = batches[worker]
            try:
                replies = self._answer(worker)
            except WorkerDied as exc:
                replies = [exc] * len(idx)
            for i, result in zip(idx, replies, strict=True):
                out[i] = result if isinstance(result, WorkerDied) else tuple(result)
        return out

    def shutdown(self) -> None:
        """Close every environment and stop the workers (a dead one is only reaped)."""
        for worker, conn in enumerate(self._conns):
            with contextlib.suppress(OSError, EOFError, RuntimeError):
                self._call(worker, "stop")
            conn.close()
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()


class RemoteEnv:
    """An environment living in a worker: ``reset`` / ``step`` / ``render`` / ``close`` are round trips."""

    def __init__(self, pool: EnvWorkers, worker: int, env_id: int) -> None:
        self.pool, self.worker, self.env_id = pool, worker, env_id

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset in the worker."""
        obs, info = self.pool._call(self.worker, "reset", self.env_id, seed)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One step in the worker (the scheduler steps many at once through ``EnvWorkers.step_many``)."""
        out = self.pool.step_many([(self, action)])[0]
        if isinstance(out, WorkerDied):
            raise out
        obs, reward, terminated, truncated, info, _ = out
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        """A frame rendered in the worker."""
        return self.pool._call(self.worker, "render", self.env_id)

    def close(self) -> None:
        """Close the environment in the worker (nothing to close on a dead one)."""
        with contextlib.suppress(WorkerDied):
            self.pool._call(self.worker, "close", self.env_id)
