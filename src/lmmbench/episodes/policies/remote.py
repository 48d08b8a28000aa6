"""``--policy ws://HOST:PORT``: a policy served over openpi's websocket protocol (openpi's
``scripts/serve_policy.py``, or ``lmmbench serve-policy``), driven from many episodes at once.

Each running episode holds one connection (at most ``--num-parallel``, opened as episodes start and reused by the
next one); the server's metadata (sent on connect) goes to run.json. Every tick, every slot that needs actions sends
its request on its own connection and the requests are in flight together (one thread each); the scheduler times
the whole exchange as one action call of that many requests. A request is the observation in openpi's keys
(``observation/<name>`` for each of the environment's native keys, ``prompt`` for the instruction) plus
``"lmmbench/episode": [task, trial, seed]`` (lmmbench's server keeps per-episode state by it; openpi's servers
ignore unknown keys' absence in their input transforms only when they do not read it: the key is sent only with
``send_episode_key``). The answer's ``actions`` is the chunk; with ``replan_steps`` only its first actions are
executed, as openpi's LIBERO example. Per call: the client-side latency, the server's ``server_timing`` and the
bytes each way (``calls``); ``report()`` sums them for run.json.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmmbench.episodes.protocols import ActItem, ActOnly, EpisodeKey, EpisodeMemory

__all__ = ["RemotePolicy", "is_remote"]


def is_remote(name: str) -> bool:
    """Whether ``--policy`` names a served policy (``ws://`` or ``wss://``)."""
    return name.startswith(("ws://", "wss://"))


def openpi_request(obs: Any) -> dict[str, Any]:
    """An lmmbench observation in openpi's keys: ``instruction`` -> ``prompt``, any other ``k`` -> ``observation/k``
    (LIBERO's ``image``, ``wrist_image``, ``state`` become openpi's ``observation/image`` etc.)."""
    if not isinstance(obs, dict):
        return {"observation/state": obs}
    return {("prompt" if k == "instruction" else f"observation/{k}"): v for k, v in obs.items()}


class RemotePolicy(ActOnly):
    """An episodes policy whose actions come from a websocket policy server."""

    batched_action = True  # the slots' requests are in flight together; the server may batch them

    def __init__(self, url: str, *, timeout_s: float = 60.0, replan_steps: int | None = None,
                 send_episode_key: bool = True) -> None:
        self.url = url
        self.name = url
        self.timeout_s = timeout_s
        self.replan_steps = replan_steps
        self.send_episode_key = send_episode_key
        self._free: list[Any] = []
        self._all: list[Any] = []
        self.metadata: dict[str, Any] | None = None
        self.calls: list[dict[str, Any]] = []
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="lmmbench-ws")
        self._stack = contextlib.ExitStack()  # the connections, closed together

    def _connect(self) -> Any:
        from websockets.sync.client import connect

        from lmmbench.episodes.served.codec import unpackb

        conn = self._stack.enter_context(connect(self.url, compression=None, max_size=None,
                                                 open_timeout=self.timeout_s))
        first = conn.recv(timeout=self.timeout_s)
        if isinstance(first, str):
            raise RuntimeError(f"the policy server at {self.url} sent text instead of its metadata: {first[:200]}")
        metadata = unpackb(first)
        if self.metadata is None:
            self.metadata = metadata if isinstance(metadata, dict) else {"metadata": metadata}
        self._all.append(conn)
        return conn

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """The episode's memory, holding a connection of its own."""
        memory = EpisodeMemory(key=key, seed=seed)
        memory.data["_conn"] = self._free.pop() if self._free else self._connect()
        return memory

    def end_episode(self, memory: EpisodeMemory) -> None:
        """The episode's connection is free for the next episode."""
        conn = memory.data.pop("_conn", None)
        if conn is not None:
            self._free.append(conn)

    def dummy_action(self) -> Any:
        """Zeros of the server's action width when it says, else openpi's 32."""
        import numpy as np

        width = int((self.metadata or {}).get("action_dim", 32))
        return np.zeros(width, dtype=np.float32)

    def _call(self, item: ActItem) -> tuple[Any, dict[str, Any]]:
        import numpy as np

        from lmmbench.episodes.served.codec import packb, unpackb

        conn = item.memory.data["_conn"]
        request = openpi_request(item.observation)
        if self.send_episode_key:
            request["lmmbench/episode"] = [item.memory.key.task, item.memory.key.trial, item.memory.seed]
        data = packb(request)
        t0 = time.perf_counter_ns()
        conn.send(data)
        answer = conn.recv(timeout=self.timeout_s)
        latency_ms = (time.perf_counter_ns() - t0) / 1e6
        if isinstance(answer, str):
            raise RuntimeError(f"the policy server at {self.url} answered an error: {answer.strip()[:300]}")
        out = unpackb(answer)
        if not isinstance(out, dict) or "actions" not in out:
            raise RuntimeError(f"the policy server at {self.url} answered no 'actions' map")
        actions = np.asarray(out["actions"])
        chunk = actions if actions.ndim >= 2 else actions[None]
        if self.replan_steps is not None:
            if len(chunk) < self.replan_steps:
                raise RuntimeError(f"--replan-steps {self.replan_steps}: the served policy predicts only {len(chunk)} "
                                   "actions per chunk")
            chunk = chunk[: self.replan_steps]
        return chunk, {"latency_ms": latency_ms, "request_bytes": len(data), "response_bytes": len(answer),
                       "server_timing": dict(out.get("server_timing") or {})}

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """Every item's request on its own connection, all in flight together."""
        results = list(self._pool.map(self._call, items))
        for it, (chunk, stats) in zip(items, results, strict=True):
            it.memory.trace.append(chunk)
            self.calls.append(stats)
        return [list(chunk) for chunk, _ in results]

    def report(self) -> dict[str, Any]:
        """What run.json records: the server's metadata, and per call the latency, server timing and bytes."""
        import statistics

        lat = sorted(c["latency_ms"] for c in self.calls)
        infer = [c["server_timing"].get("infer_ms") for c in self.calls if "infer_ms" in c["server_timing"]]

        def pct(p: float) -> float | None:
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None

        return {"url": self.url, "server_metadata": self.metadata, "requests": len(self.calls),
                "latency_ms_p50": pct(0.5), "latency_ms_p90": pct(0.9), "latency_ms_p99": pct(0.99),
                "server_infer_ms_median": statistics.median(infer) if infer else None,
                "request_bytes": sum(c["request_bytes"] for c in self.calls),
                "response_bytes": sum(c["response_bytes"] for c in self.calls),
                "connections": len(self._all)}

    def close(self) -> None:
        """Close every connection."""
        self._stack.close()
        self._pool.shutdown(wait=False)
