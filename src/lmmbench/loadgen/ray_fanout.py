"""Distributed load (``perf --executor ray --workers N``): the worker plans of one global schedule
run in N Ray actors, on any node of a Ray cluster, exactly as ``--workers`` runs them in processes.

Each actor prepares its worker (encode, connect, warm up), reports ready and waits for the start
instant; the driver then sends every actor the same start ``t0`` expressed in *that actor's* clock.
The offset of an actor's ``perf_counter_ns`` from the driver's is estimated by a ping exchange: the
driver reads its clock, asks the actor for its own, reads its clock again, and keeps the ping with
the shortest round trip (offset = actor - midpoint, uncertain by at most half that round trip). On
one machine ``perf_counter_ns`` is the same monotonic clock in every process, so the offset comes out
near zero; across nodes the clocks are unrelated and the offset is what lets one schedule start at
one instant and puts the merged records on the driver's time line. Records come back shifted into
the driver's clock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from lmmbench.core.errors import UserError, require
from lmmbench.core.request_records import RequestRecord
from lmmbench.loadgen.driver import WorkerPlan, WorkerResult, run_worker

__all__ = ["MACHINE_RESOURCE", "MACHINE_UNITS", "ActorClock", "LoadActor", "estimate_offset", "init_ray", "run_on_ray",
           "shift_record"]

PINGS = 15
START_MARGIN_NS = 200_000_000  # t0 this far after the last actor reported ready


@dataclass(frozen=True)
class ActorClock:
    """An actor's clock offset from the driver (ns, actor - driver), the best ping's round trip, its node."""

    worker: int
    offset_ns: int
    rtt_ns: int
    node: str


class LoadActor:
    """A Ray actor (threaded: ``run`` waits for ``start`` in another call) running one worker plan."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._t0: int | None = None
        self._go = threading.Event()

    def clock_ns(self) -> int:
        """This process's ``perf_counter_ns``."""
        return time.perf_counter_ns()

    def node(self) -> str:
        """The node this actor runs on (host name and pid)."""
        return f"{os.uname().nodename}:{os.getpid()}"

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the worker is prepared and waits for its start instant."""
        return self._ready.wait(timeout_s)

    def start(self, t0_ns: int) -> None:
        """Release the worker at ``t0_ns`` (this actor's clock)."""
        self._t0 = t0_ns
        self._go.set()

    def run(self, plan: WorkerPlan, loop_kind: str) -> WorkerResult:
        """Prepare, report ready, wait for ``start``, run the plan; records in this actor's clock."""

        def start() -> int:
            self._ready.set()
            self._go.wait()
            assert self._t0 is not None
            return self._t0

        return run_worker(plan, loop_kind, start, None)


def estimate_offset(clock: Any, pings: int = PINGS) -> tuple[int, int]:
    """``(offset_ns, rtt_ns)`` of the remote ``clock()`` against ours, from the shortest of ``pings`` round trips."""
    best: tuple[int, int] | None = None
    for _ in range(pings):
        a = time.perf_counter_ns()
        remote = int(clock())
        b = time.perf_counter_ns()
        if best is None or b - a < best[1]:
            best = (remote - (a + b) // 2, b - a)
    assert best is not None
    return best


def shift_record(rec: RequestRecord, delta_ns: int) -> None:
    """Move every instant of ``rec`` by ``-delta_ns`` (0 stays 0: it means never happened)."""
    for f in fields(rec):
        if not f.name.endswith("_ns"):
            continue
        value = getattr(rec, f.name)
        if isinstance(value, int) and value:
            setattr(rec, f.name, value - delta_ns)
        elif isinstance(value, list):
            setattr(rec, f.name, [v - delta_ns if v else v for v in value])


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A ``host:port`` (or ``ray://host:port``) cluster address must answer a TCP connect within ``timeout_s``:
    ray.init would otherwise wait minutes for a head node that is not there. ``auto`` and ``local`` pass."""
    import socket

    from lmmbench.core.errors import UserError

    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return  # 'auto', 'local' or another form ray resolves itself
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise UserError(f"--ray-address {address}: no Ray cluster answers there ({exc}); start one with "
                        "`ray start --head`, or leave --ray-address out for a local cluster") from None


MACHINE_RESOURCE = "lmmbench_machine"  # a node's whole machine: a timing row asks for all its units
MACHINE_UNITS = 1000


def init_ray(address: str | None) -> bool:
    """Connect to the cluster at ``address`` or start a local one (its workers get this process's
    ``LMMBENCH_HOME`` and ``PYTHONPATH``); True when this call started or joined it."""
    require("ray", "ray")
    import ray

    if ray.is_initialized():
        return False
    with _keeping_sigterm_handler():
        _start_or_join(ray, address)
    return True


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the SIGTERM handler with ``sys.exit``: lmmbench's own (which stops the rows and writes
    what they measured, exit 143) is put back."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _start_or_join(ray: Any, address: str | None) -> None:
    if address:
        _check_reachable(address)
        ray.init(address=address, log_to_driver=False)
    else:
        env = {k: v for k, v in os.environ.items() if k in ("LMMBENCH_HOME", "PYTHONPATH")}
        try:
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                     resources={MACHINE_RESOURCE: MACHINE_UNITS},  # timing rows take all of it (executors.ray)
                     runtime_env={"env_vars": env} if env else None)  # fmt: skip
        except Exception as exc:  # Ray's own start failed (seen: "timed out during startup" on a loaded machine)
            with contextlib.suppress(Exception):
                ray.shutdown()
            line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise UserError(f"ray: the local Ray cluster did not start ({line}); try again on a quieter machine, "
                            "or start one with `ray start --head` and pass --ray-address auto") from None


def run_on_ray(plans: list[WorkerPlan], loop_kind: str, address: str | None = None,
               ready_timeout_s: float = 300.0) -> tuple[list[WorkerResult], list[ActorClock]]:  # fmt: skip
    """Run ``plans`` in one Ray actor each, started at one instant; records come back in our clock."""
    started = init_ray(address)
    import ray

    actor_cls = ray.remote(num_cpus=0, max_concurrency=4)(LoadActor)
    actors = [actor_cls.remote() for _ in plans]
    try:
        clocks = []
        for i, actor in enumerate(actors):
            off, rtt = estimate_offset(lambda a=actor: ray.get(a.clock_ns.remote()))
            clocks.append(ActorClock(i, off, rtt, ray.get(actor.node.remote())))
        refs = [a.run.remote(p, loop_kind) for a, p in zip(actors, plans, strict=True)]
        for i, actor in enumerate(actors):
            if not ray.get(actor.wait_ready.remote(ready_timeout_s)):
                ray.get(refs[i], timeout=1)  # surfaces the actor's error if it failed while preparing
                raise UserError(f"load actor {i} was not ready after {ready_timeout_s:g} s")
        t0 = time.perf_counter_ns() + START_MARGIN_NS
        ray.get([a.start.remote(t0 + c.offset_ns) for a, c in zip(actors, clocks, strict=True)])
        results: list[WorkerResult] = ray.get(refs)
    finally:
        for actor in actors:
            ray.kill(actor)
        if started:
            ray.shutdown()
    for res, c in zip(results, clocks, strict=True):
        for rec in res.records:
            shift_record(rec, c.offset_ns)
    return results, clocks
