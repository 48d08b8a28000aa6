"""Environment steps in worker processes, so a slow simulator does not serialize the ticks.

With ``env_workers=W`` the scheduler builds every environment inside one of ``W`` forked worker
processes (slot ``i`` -> worker ``i % W``) and, each tick, sends every worker the steps of its
slots at once, then collects the results: the workers step in parallel, so a tick with ``N``
slots whose step takes ``S`` takes about ``ceil(N / W) * S`` instead of ``N * S`` (as gymnasium's
``AsyncVectorEnv``). Outcomes do not change: each environment is reset with its episode's seed in
its worker and gets the same actions in the same order. Workers are forked (the environment
factory is inherited, not pickled); observations, actions and infos travel pickled through pipes.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from lmmbench.core.clock import now_ns
from lmmbench.core.errors import UserError

__all__ = ["EnvWorkers", "RemoteEnv"]


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
    """``workers`` forked processes that hold environments; see the module docstring."""

    def __init__(self, make_env: Callable[[int], Any], workers: int) -> None:
        if workers < 1:
            raise ValueError("env workers must be >= 1")
        ctx = mp.get_context("fork")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for _ in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child, make_env), daemon=True)
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self._ids = itertools.count()

    def _call(self, worker: int, *msg: Any) -> Any:
        self._conns[worker].send(msg)
        return self._answer(worker)

    def _answer(self, worker: int) -> Any:
        status, reply = self._conns[worker].recv()
        if status == "user_error":
            raise UserError(reply)
        if status != "ok":
            raise RuntimeError(f"environment worker {worker}: {reply}")
        return reply

    def make(self, slot: int, task: int) -> RemoteEnv:
        """A new environment of ``task`` in the worker of ``slot``."""
        worker, env_id = slot % len(self._conns), next(self._ids)
        self._call(worker, "make", env_id, task)
        return RemoteEnv(self, worker, env_id)

    def step_many(self, moves: Sequence[tuple[RemoteEnv, Any]]) -> list[tuple[Any, ...]]:
        """Step every (env, action) pair: all workers at once, each its own envs in order. Each result is
        ``(obs, reward, terminated, truncated, info, step_ns)``."""
        batches: dict[int, list[int]] = {}
        for i, (env, _) in enumerate(moves):
            batches.setdefault(env.worker, []).append(i)
        for worker, idx in batches.items():
            self._conns[worker].send(("step", [(moves[i][0].env_id, moves[i][1]) for i in idx]))
        out: list[tuple[Any, ...]] = [()] * len(moves)
        for worker, idx in batches.items():
            for i, result in zip(idx, self._answer(worker), strict=True):
                out[i] = tuple(result)
        return out

    def shutdown(self) -> None:
        """Close every environment and stop the workers."""
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
        obs, reward, terminated, truncated, info, _ = self.pool.step_many([(self, action)])[0]
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        """A frame rendered in the worker."""
        return self.pool._call(self.worker, "render", self.env_id)

    def close(self) -> None:
        """Close the environment in the worker."""
        self.pool._call(self.worker, "close", self.env_id)
