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
bytes each way (``calls``); ``report()`` sums them for run.json, with calls per second, latency percentiles and
the run's time split (``served_split``).

Faults (``ServedFault``, its ``kind``): a server that closes the connection or refuses a new one
(``connection_lost``: killed, crashed), answers what is not openpi's format (``malformed``), answers an error text
frame (``server_error``) or gives no answer within ``timeout_s`` (``timeout``). Each fails the episode whose request
met it: ``act`` returns the fault in that item's place (the scheduler ends the episode with the fault as its cause),
the connection is closed and never reused (a late answer cannot reach another episode), the other episodes go on.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmmbench.episodes.protocols import ActItem, ActOnly, EpisodeKey, EpisodeMemory

__all__ = ["RemotePolicy", "ServedFault", "is_remote", "served_split"]


def is_remote(name: str) -> bool:
    """Whether ``--policy`` names a served policy (``ws://`` or ``wss://``)."""
    return name.startswith(("ws://", "wss://"))


def openpi_request(obs: Any) -> dict[str, Any]:
    """An lmmbench observation in openpi's keys: ``instruction`` -> ``prompt``, any other ``k`` -> ``observation/k``
    (LIBERO's ``image``, ``wrist_image``, ``state`` become openpi's ``observation/image`` etc.)."""
    if not isinstance(obs, dict):
        return {"observation/state": obs}
    return {("prompt" if k == "instruction" else f"observation/{k}"): v for k, v in obs.items()}


class ServedFault(RuntimeError):
    """A request to the policy server that failed; ``kind``: connection_lost, malformed, server_error or timeout."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"served policy {kind}: {message}")
        self.kind = kind


def _fault(exc: BaseException, url: str, timeout_s: float) -> ServedFault:
    """The fault an exception of a request (or of connecting) stands for."""
    from websockets.exceptions import ConnectionClosed

    if isinstance(exc, ServedFault):
        return exc
    if isinstance(exc, TimeoutError):
        return ServedFault("timeout", f"the server at {url} gave no answer within {timeout_s:g} s (--call-timeout-s)")
    if isinstance(exc, ConnectionClosed | OSError):
        return ServedFault("connection_lost", f"the server at {url} is gone ({type(exc).__name__}: {exc})")
    return ServedFault("malformed", f"the server at {url} answered what is not openpi's format "
                       f"({type(exc).__name__}: {exc})")


def _chunk_of(answer: bytes, url: str) -> tuple[Any, dict[str, Any]]:
    """The actions (H, A) and the server_timing of an answer; ValueError when it is not openpi's format."""
    import numpy as np

    from lmmbench.episodes.served.codec import unpackb

    out = unpackb(answer)
    if not isinstance(out, dict) or "actions" not in out:
        raise ValueError(f"no 'actions' map in the answer (got {type(out).__name__})")
    actions = np.asarray(out["actions"])
    if actions.dtype.kind not in "biuf" or actions.size == 0 or actions.ndim > 2:
        raise ValueError(f"'actions' is not a numeric (H, A) array (dtype {actions.dtype}, shape {actions.shape})")
    timing = out.get("server_timing") or {}
    if not isinstance(timing, dict):
        raise ValueError("'server_timing' is not a map")
    return (actions if actions.ndim == 2 else actions[None]), dict(timing)


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
        self.faults: list[dict[str, Any]] = []  # per failed request: kind, cause, episode
        self.wait_ns = 0  # per act call: first request sent to last answer received, summed
        self.infer_ns = 0  # per act call: the longest server_timing infer_ms of its answers, summed
        self.warmup_requests = 0  # requests before mark_run_start (the probe step, warm-up episodes)
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="lmmbench-ws")
        self._stack = contextlib.ExitStack()  # the connections, closed together

    def _connect(self) -> Any:
        from websockets.sync.client import connect

        from lmmbench.episodes.served.codec import unpackb

        conn = self._stack.enter_context(connect(self.url, compression=None, max_size=None,
                                                 open_timeout=self.timeout_s, close_timeout=1.0))
        self._all.append(conn)
        first = conn.recv(timeout=self.timeout_s)
        if isinstance(first, str):
            raise ServedFault("server_error", f"the server at {self.url} sent text instead of its metadata: "
                              f"{first[:200]}")
        metadata = unpackb(first)
        if self.metadata is None:
            self.metadata = metadata if isinstance(metadata, dict) else {"metadata": metadata}
        return conn

    def check_reachable(self) -> None:
        """Connect once before the run (the metadata for run.json); a server not there is one ``UserError`` line."""
        from lmmbench.core.errors import UserError

        try:
            self._free.append(self._connect())
        except Exception as exc:
            raise UserError(f"--policy {self.url}: {_fault(exc, self.url, self.timeout_s)}; start it (lmmbench "
                            "serve-policy, or openpi's scripts/serve_policy.py) or fix the address") from None

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """The episode's memory, holding a connection of its own (or, when none can be opened, the fault that
        fails the episode at its first call)."""
        memory = EpisodeMemory(key=key, seed=seed)
        try:
            memory.data["_conn"] = self._free.pop() if self._free else self._connect()
        except Exception as exc:
            memory.data["_fault"] = _fault(exc, self.url, self.timeout_s)
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
        from lmmbench.episodes.served.codec import packb

        if "_fault" in item.memory.data:
            raise item.memory.data["_fault"]
        conn = item.memory.data["_conn"]
        request = openpi_request(item.observation)
        if self.send_episode_key:
            request["lmmbench/episode"] = [item.memory.key.task, item.memory.key.trial, item.memory.seed]
        data = packb(request)
        t0 = time.perf_counter_ns()
        conn.send(data)
        answer = conn.recv(timeout=self.timeout_s)
        t1 = time.perf_counter_ns()
        if isinstance(answer, str):
            raise ServedFault("server_error", f"the server at {self.url} answered an error: {answer.strip()[:300]}")
        chunk, timing = _chunk_of(answer, self.url)
        if self.replan_steps is not None:
            if len(chunk) < self.replan_steps:
                raise ServedFault("malformed", f"--replan-steps {self.replan_steps}: the served policy predicts only "
                                  f"{len(chunk)} actions per chunk")
            chunk = chunk[: self.replan_steps]
        return chunk, {"latency_ms": (t1 - t0) / 1e6, "request_bytes": len(data), "response_bytes": len(answer),
                       "server_timing": timing, "_t0": t0, "_t1": t1}

    def _safe_call(self, item: ActItem) -> tuple[Any, dict[str, Any]]:
        """``_call``, or (the fault, its record) when it failed: the connection is closed and not reused."""
        t0 = time.perf_counter_ns()
        try:
            return self._call(item)
        except Exception as exc:
            fault = _fault(exc, self.url, self.timeout_s)
            conn = item.memory.data.pop("_conn", None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            return fault, {"kind": fault.kind, "cause": str(fault), "episode": item.memory.key.id,
                           "after_ms": (time.perf_counter_ns() - t0) / 1e6}

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """Every item's request on its own connection, all in flight together; a failed request's place holds its
        ``ServedFault`` (the scheduler fails that episode with it)."""
        results = list(self._pool.map(self._safe_call, items))
        out: list[Any] = []
        done = [stats for chunk, stats in results if not isinstance(chunk, ServedFault)]
        if done:
            self.wait_ns += max(s.pop("_t1") for s in done) - min(s.pop("_t0") for s in done)
            infer = [float(s["server_timing"]["infer_ms"]) for s in done if "infer_ms" in s["server_timing"]]
            self.infer_ns += int(max(infer, default=0.0) * 1e6)
        for it, (chunk, stats) in zip(items, results, strict=True):
            if isinstance(chunk, ServedFault):
                self.faults.append(stats)
                out.append(chunk)
                continue
            it.memory.trace.append(chunk)
            self.calls.append(stats)
            out.append(list(chunk))
        return out

    def mark_run_start(self) -> None:
        """What was called so far (the probe step, warm-up episodes) is not the measured run's: counted apart."""
        self.warmup_requests += len(self.calls) + len(self.faults)
        self.calls, self.faults, self.wait_ns, self.infer_ns = [], [], 0, 0

    def fault_counts(self) -> dict[str, int]:
        """Failed requests by kind."""
        counts: dict[str, int] = {}
        for f in self.faults:
            counts[f["kind"]] = counts.get(f["kind"], 0) + 1
        return counts

    def report(self, totals: Any = None) -> dict[str, Any]:
        """What run.json records: the server's metadata; the calls' latency percentiles, server timing and bytes;
        the faults by kind; with the run's ``totals`` (``RunTotals``), calls per second and the time split."""
        import statistics

        lat = sorted(c["latency_ms"] for c in self.calls)
        infer = [c["server_timing"]["infer_ms"] for c in self.calls if "infer_ms" in c["server_timing"]]

        def pct(p: float) -> float | None:  # nearest rank
            return lat[min(len(lat) - 1, max(0, math.ceil(p * len(lat)) - 1))] if lat else None

        out = {"url": self.url, "server_metadata": self.metadata, "requests": len(self.calls),
               "latency_ms_p50": pct(0.5), "latency_ms_p90": pct(0.9), "latency_ms_p99": pct(0.99),
               "latency_ms_max": lat[-1] if lat else None,
               "server_infer_ms_median": statistics.median(infer) if infer else None,
               "request_bytes": sum(c["request_bytes"] for c in self.calls),
               "response_bytes": sum(c["response_bytes"] for c in self.calls),
               "connections": len(self._all), "call_timeout_s": self.timeout_s,
               "warmup_requests": self.warmup_requests, "failed_requests": len(self.faults),
               "faults": self.fault_counts(), "fault_records": self.faults}
        if totals is not None:
            out.update(served_split(totals, self.wait_ns, self.infer_ns, len(self.calls)))
        return out

    def close(self) -> None:
        """Close every connection."""
        self._stack.close()
        self._pool.shutdown(wait=False)


def served_split(totals: Any, wait_ns: int, infer_ns: int, requests: int) -> dict[str, Any]:
    """Calls per second and where the run's wall time went: the environment (steps, builds, resets, the env workers'
    start-up), waiting for the server (per action call, first request sent to last answer received), of which inside
    the server (per call the longest ``server_timing.infer_ms``), and lmmbench (the rest: scheduling, packing,
    threads)."""
    wall = totals.wall_ns
    env = totals.env_ns + totals.env_build_ns + totals.env_reset_ns + totals.env_workers_start_ns
    other = totals.planning_ns + totals.action_ns - wait_ns  # inside act() but not waiting: packing, threads
    return {"calls_per_s": requests / (wall / 1e9) if wall > 0 else None,
            "time_split_ms": {"wall": wall / 1e6, "environment": env / 1e6, "waiting_for_server": wait_ns / 1e6,
                              "inside_server": infer_ns / 1e6, "lmmbench": (wall - env - wait_ns) / 1e6,
                              "lmmbench_in_action_calls": other / 1e6}}
