"""``lmmbench serve-policy``: any policy lmmbench runs, served over openpi's websocket protocol
(``src/openpi/serving/websocket_policy_server.py`` in Physical-Intelligence/openpi, read, not copied), with the
episodic design's cross-episode batching moved into the server.

The protocol is openpi's: on connect the server sends its metadata (msgpack-numpy, ``codec``); each request is one
observation dict, each answer ``{"actions": (H, A), "server_timing": {"infer_ms", "prev_total_ms", ...}}``;
``GET /healthz`` answers ``OK``; an error in the policy is sent as a text frame and the connection is closed, as
openpi's server does. lmmbench adds:

* batching: requests from different connections that arrive within ``max_wait_ms`` of the first (at most
  ``max_batch``) go to the policy as ONE ``act`` call; ``server_timing`` also says ``queue_ms`` (arrival to the
  start of that call) and ``batch_size``;
* episodes: a request may carry ``"lmmbench/episode": [task, trial, seed]`` (lmmbench's driver sends it); each
  (connection, episode) gets its own ``EpisodeMemory`` (its seeded noise), the previous episode of the connection
  is ended when a new one starts. openpi's plain client sends no such key: each connection is then one episode
  (task = the connection's number, trial 0, seed 0);
* keys: openpi's ``observation/<name>`` keys reach the policy as ``<name>`` and ``prompt`` as ``instruction`` (the
  native keys of lmmbench's environments: ``observation/image`` -> ``image``, ``observation/state`` -> ``state``);
* ``GET /metrics``: the batch-size histogram and queueing times as JSON, also written to ``metrics_out`` at exit.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.episodes.served.codec import packb, unpackb

__all__ = ["EPISODE_KEY", "PolicyServer", "native_observation"]

EPISODE_KEY = "lmmbench/episode"  # [task, trial, seed]: which episode a request belongs to (lmmbench's driver)


def native_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """openpi's keys as lmmbench's: ``observation/<name>`` -> ``<name>``, ``prompt`` -> ``instruction``."""
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if key == EPISODE_KEY:
            continue
        name = "instruction" if key == "prompt" else key.removeprefix("observation/")
        out[name] = value
    return out


@dataclass
class _Request:
    conn: int
    obs: dict[str, Any]
    future: asyncio.Future[Any]
    arrived_ns: int = field(default_factory=time.perf_counter_ns)


class PolicyServer:
    """Serves ``policy`` (an episodes ``Policy``) over openpi's protocol with cross-connection batching."""

    def __init__(self, policy: Any, *, max_batch: int = 8, max_wait_ms: float = 2.0,
                 metadata: dict[str, Any] | None = None, metrics_out: Path | None = None) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self.metadata = {"policy": getattr(policy, "name", type(policy).__name__), "max_batch": max_batch,
                         "max_wait_ms": max_wait_ms, "server": "lmmbench serve-policy", **(metadata or {})}
        self.metrics_out = metrics_out
        self.batch_histogram: dict[int, int] = {}
        self.queue_ms: list[float] = []
        self._episodes: dict[int, tuple[Any, Any]] = {}  # connection -> (episode id, memory)
        self._conns = itertools.count()
        self._queue: asyncio.Queue[_Request] | None = None
        self._lock = threading.Lock()

    # -- the policy side (a worker thread) -------------------------------------------------------
    def _memory(self, conn: int, obs: dict[str, Any]) -> tuple[Any, bool]:
        """This request's episode memory, and whether the episode is new (it needs planning first)."""
        from lmmbench.episodes.protocols import EpisodeKey

        raw = obs.get(EPISODE_KEY)
        task, trial, seed = (int(v) for v in raw) if raw is not None else (conn, 0, 0)
        held = self._episodes.get(conn)
        if held is not None and held[0] == (task, trial, seed):
            return held[1], False
        if held is not None:
            self._end(held[1])
        memory = self.policy.new_episode(EpisodeKey(task, trial), seed)
        self._episodes[conn] = ((task, trial, seed), memory)
        return memory, True

    def _end(self, memory: Any) -> None:
        end = getattr(self.policy, "end_episode", None)
        if callable(end):
            end(memory)

    def forward(self, batch: Sequence[_Request]) -> list[Any]:
        """One ``act`` call for every request of the batch (a ``plan`` first where the episode needs one)."""
        import numpy as np

        from lmmbench.episodes.protocols import ActItem

        with self._lock:
            items, fresh = [], []
            for req in batch:
                memory, new = self._memory(req.conn, req.obs)
                items.append(ActItem(memory, native_observation(req.obs), {}))
                fresh.append(new)
            planning = [it for it, new in zip(items, fresh, strict=True) if new or self.policy.needs_plan(it)]
            if planning:
                groups = [planning] if getattr(self.policy, "batched_planning", False) else [[it] for it in planning]
                for group in groups:
                    self.policy.plan(group)
            chunks = self.policy.act(items)
        return [np.stack([np.asarray(a) for a in chunk]) for chunk in chunks]

    def close_connection(self, conn: int) -> None:
        """The connection closed: its episode ends."""
        with self._lock:
            held = self._episodes.pop(conn, None)
            if held is not None:
                self._end(held[1])

    # -- the asyncio side ------------------------------------------------------------------------
    async def _batcher(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():  # already waiting: no window needed
                batch.append(self._queue.get_nowait())  # (with --max-wait-ms 0 they went one by one: measured)
            deadline = loop.time() + self.max_wait_ms / 1000.0
            while len(batch) < self.max_batch:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except TimeoutError:
                    break
            start = time.perf_counter_ns()
            self.batch_histogram[len(batch)] = self.batch_histogram.get(len(batch), 0) + 1
            try:
                outs = await loop.run_in_executor(None, self.forward, batch)
            except Exception as exc:  # the policy failed: every request of the batch gets the error
                for req in batch:
                    if not req.future.done():
                        req.future.set_exception(exc)
                continue
            infer_ms = (time.perf_counter_ns() - start) / 1e6
            for req, out in zip(batch, outs, strict=True):
                queue_ms = (start - req.arrived_ns) / 1e6
                self.queue_ms.append(queue_ms)
                if not req.future.done():
                    req.future.set_result((out, infer_ms, queue_ms, len(batch)))

    async def _handler(self, websocket: Any) -> None:
        import websockets

        assert self._queue is not None
        conn = next(self._conns)
        await websocket.send(packb(self.metadata))
        prev_total_ms: float | None = None
        try:
            while True:
                message = await websocket.recv()
                t0 = time.perf_counter_ns()
                try:
                    obs = unpackb(message)
                    if not isinstance(obs, dict):
                        raise ValueError(f"an observation must be a map, got {type(obs).__name__}")
                    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                    self._queue.put_nowait(_Request(conn, obs, future))
                    actions, infer_ms, queue_ms, size = await future
                except Exception as exc:  # openpi's server: the error as a text frame, then close
                    await websocket.send(f"{type(exc).__name__}: {exc}")
                    await websocket.close(code=1011, reason="policy error; its message is in the previous frame")
                    return
                timing = {"infer_ms": infer_ms, "queue_ms": queue_ms, "batch_size": size}
                if prev_total_ms is not None:
                    timing["prev_total_ms"] = prev_total_ms
                await websocket.send(packb({"actions": actions, "server_timing": timing}))
                prev_total_ms = (time.perf_counter_ns() - t0) / 1e6
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_connection(conn)

    def metrics(self) -> dict[str, Any]:
        """The batch-size histogram and the queueing times (ms: each request's wait from arrival to its call)."""
        import statistics

        q = sorted(self.queue_ms)
        return {"batch_size_histogram": {str(k): v for k, v in sorted(self.batch_histogram.items())},
                "requests": len(q), "queue_ms_median": statistics.median(q) if q else None,
                "queue_ms_max": q[-1] if q else None, "max_batch": self.max_batch, "max_wait_ms": self.max_wait_ms}

    def _http(self, connection: Any, request: Any) -> Any:
        import http

        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if request.path == "/metrics":
            return connection.respond(http.HTTPStatus.OK, json.dumps(self.metrics()) + "\n")
        return None

    async def serve(self, host: str, port: int, ready: Any = None, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set (or forever); ``ready(port)`` is called once listening."""
        from websockets.asyncio.server import serve

        self._queue = asyncio.Queue()
        batcher = asyncio.create_task(self._batcher())
        try:
            async with serve(self._handler, host, port, compression=None, max_size=None,
                             process_request=self._http) as server:
                bound = next(iter(server.sockets)).getsockname()[1]
                if ready is not None:
                    ready(bound)
                await (stop.wait() if stop is not None else asyncio.Future())
        finally:
            batcher.cancel()
            self.write_metrics()

    def write_metrics(self) -> None:
        """The metrics as JSON at ``metrics_out`` (when given)."""
        if self.metrics_out is not None:
            self.metrics_out.parent.mkdir(parents=True, exist_ok=True)
            self.metrics_out.write_text(json.dumps(self.metrics(), indent=1) + "\n", encoding="utf-8")
