"""The event-loop driver of one load-generating process.

Open loop: every request has an absolute target time ``t0 + offset``. On Linux a timerfd armed at
that absolute instant wakes the loop and the request is sent from that callback (no busy-waiting,
no millisecond timer rounding). Elsewhere the driver sleeps until ``spin_us`` before the target
(event-loop timers round to ~1 ms), then yields to the loop (``sleep(0)``, so responses keep being
read) until the target, and sends. A concurrency cap is a separate
queue: a request that finds no free slot waits, and its latency still counts from its scheduled
time. Closed loop: N clients, each sending its next request when the previous one finished.
Sending and receiving are callbacks (no task per request); raw responses are parsed only after
the load, so nothing heavy runs while requests are being timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from lmmbench.core.request_records import PerfRequest, RequestRecord
from lmmbench.core.signals import record_stop_signal
from lmmbench.loadgen.journal import Journal
from lmmbench.loadgen.precise_timer import PreciseTimers
from lmmbench.loadgen.protocol import StreamClient, make_client

__all__ = ["WorkerPlan", "WorkerResult", "run_worker", "run_worker_async"]

_now = time.perf_counter_ns


@dataclass
class WorkerPlan:
    """Everything one worker process needs (picklable)."""

    worker: int
    client_kwargs: dict[str, Any]
    requests: list[PerfRequest]  # distinct requests; request id i uses requests[i % len]
    schedule: list[tuple[int, int]] | None = None  # open loop: (request id, offset ns)
    closed_ids: list[int] | None = None  # closed loop with a count: the ids this worker sends
    closed_stride: int = 1  # closed loop with a duration: ids worker, worker+stride, ...
    concurrency: int | None = None
    duration_ns: int | None = None
    warmup: int = 0
    spin_ns: int = 1_000_000
    preopen: int = 0
    tokenizer: str | None = None
    keep_text: bool = False
    backend: str = "openai-http"
    drain_timeout_s: float = 600.0
    precise_timers: bool = True  # timerfd-driven sends where available (Linux)
    labels: dict[str, Any] = field(default_factory=dict)
    journal_path: str | None = None  # finished requests appended here during the load (see journal.py)
    journal_labels: dict[str, Any] = field(default_factory=dict)
    journal_period_s: float = 0.5


@dataclass
class WorkerResult:
    """Finished, parsed records of one worker and what it could not send."""

    worker: int
    records: list[RequestRecord]
    not_sent: int
    connections_opened: int
    interrupted: bool
    cpu_s: float = 0.0  # CPU time (user + system) of this process during the load itself


#: failures of the transport, which aiohttp raises as exceptions in AISBench (an HTTP status is an answer, not resent)
RESENT_ON = frozenset({"connect", "disconnect", "timeout", "malformed_sse"})
_KEPT = frozenset({"request_id", "worker", "warmup", "scheduled_ns", "slot_ns", "labels", "input_tokens", "attempts"})


def _clear_attempt(rec: RequestRecord) -> None:
    """Reset what the failed attempt recorded (AISBench's ``Output.clear_time_points``), counting the next one."""
    fresh = RequestRecord(rec.request_id)
    for f in fields(RequestRecord):
        if f.name not in _KEPT:
            setattr(rec, f.name, getattr(fresh, f.name))
    rec.attempts += 1


class _Driver:
    def __init__(self, plan: WorkerPlan, client: StreamClient, encoded: list[bytes],
                 progress: Callable[[_Driver], None] | None, journal: Journal | None = None) -> None:  # fmt: skip
        self.plan = plan
        self._journal_add = journal.add if journal is not None else None
        self.client = client
        self.encoded = encoded
        self.progress = progress
        self.records: list[RequestRecord] = []
        self.in_flight = 0
        self.waiting: deque[tuple[RequestRecord, bytes]] = deque()
        self.stopped = False
        self.all_issued = False
        self.done = asyncio.Event()
        self.issued = 0
        self.completed = 0
        self.errors = 0
        self.not_sent = 0
        self.warmup_phase = False
        self.cap = plan.concurrency
        self.pending_turns = 0  # multi-turn: next turns waiting out their think time
        self._fed: dict[int, bytes] = {}  # multi-turn: next turns encoded with the server's replies so far
        self._history: dict[int, list[Any]] = {}  # multi-turn: the messages a turn was sent with
        # closed loop state
        self._closed_iter: Any = None
        self._closed_deadline = 0
        self._wake: Callable[[], None] | None = None

    # callbacks -------------------------------------------------------------------------
    def _data(self, rid: int) -> bytes:
        fed = self._fed.pop(rid, None) if self._fed else None
        return fed if fed is not None else self.encoded[rid % len(self.encoded)]

    def _send(self, rec: RequestRecord, data: bytes, slot_ns: int) -> None:
        rec.slot_ns = slot_ns
        self.in_flight += 1
        self.issued += 1
        self.records.append(rec)
        tries = self.plan.requests[rec.request_id % len(self.plan.requests)].attempts
        self.client.send(rec, data, self._on_done if tries <= 1 else self._resending(data, tries))

    def _resending(self, data: bytes, tries: int) -> Callable[[RequestRecord], None]:
        """The done callback of a request sent at most ``tries`` times: after a transport failure (AISBench's
        ``BaseAPIModel.generate`` retries on an exception) the record is cleared but for its identity and schedule
        and sent again on the same slot; the last attempt's outcome is the record's."""

        def done(rec: RequestRecord) -> None:
            if rec.attempts < tries and rec.error_kind in RESENT_ON and not self.stopped:
                _clear_attempt(rec)
                self.client.send(rec, data, done)
                return
            self._on_done(rec)

        return done

    def _on_done(self, rec: RequestRecord) -> None:
        self.in_flight -= 1
        self.completed += 1
        if rec.error_kind or rec.status != 200:
            self.errors += 1
        if self._journal_add is not None:
            self._journal_add(rec)
        follows = self._schedule_next_turn(rec)
        if self.waiting and not self.stopped:
            nxt, data = self.waiting.popleft()
            self._send(nxt, data, _now())
        elif self._closed_iter is not None and not follows:  # a client keeps its conversation
            self._next_closed()
        self._check_done()

    def _check_done(self) -> None:
        if self.all_issued and self.in_flight == 0 and not self.waiting and not self.pending_turns:
            self.done.set()

    def _schedule_next_turn(self, rec: RequestRecord) -> bool:
        """Multi-turn: after a completed turn, send the conversation's next one after its think time."""
        sent = self._history.pop(rec.request_id, None) if self._history else None
        if rec.warmup or not rec.ok or self.stopped:
            return False
        req = self.plan.requests[rec.request_id % len(self.plan.requests)]
        if req.next_turn is None:
            return False
        nxt = self.plan.requests[req.next_turn % len(self.plan.requests)]
        if nxt.follows_replies:
            self._feed_reply(rec, req, nxt, sent)
        self.pending_turns += 1
        self._send_turn(req.next_turn, (rec.end_ns or _now()) + req.think_ns)
        return True

    def _feed_reply(self, rec: RequestRecord, req: PerfRequest, nxt: PerfRequest, sent: list[Any] | None) -> None:
        """Encode turn ``nxt``: the conversation so far (``sent``: the messages ``rec`` went with, None for a first
        turn), the server's reply to ``rec``, then its own messages."""
        sent = sent if sent is not None else list(req.payload.get("messages") or [])
        copy = RequestRecord(rec.request_id, status=rec.status, event_times_ns=list(rec.event_times_ns),
                             event_data=list(rec.event_data))  # fmt: skip
        reply = self.client.finalize(copy, None, True).output_text
        messages = [*sent, {"role": "assistant", "content": reply}, *(nxt.payload.get("messages") or [])]
        assert req.next_turn is not None
        self._history[req.next_turn] = messages
        self._fed[req.next_turn] = self.client.encode(replace(nxt, payload={**nxt.payload, "messages": messages}))

    def _send_turn(self, rid: int, target_ns: int) -> None:
        """Send turn ``rid`` at ``target_ns`` (loop timers may fire up to ~1 ms early: re-armed then)."""
        wait_ns = target_ns - _now()
        if wait_ns > 0 and not self.stopped:
            asyncio.get_running_loop().call_later(wait_ns / 1e9, self._send_turn, rid, target_ns)
            return
        self.pending_turns -= 1
        if self.stopped:
            self.not_sent += 1
            self._check_done()
            return
        self._dispatch(rid, target_ns)

    def _next_closed(self) -> None:
        now = _now()
        if self.stopped or (self._closed_deadline and now >= self._closed_deadline):
            self._closed_exhausted()
            return
        rid = next(self._closed_iter, None)
        if rid is None:
            self._closed_exhausted()
            return
        rec = RequestRecord(rid, self.plan.worker, self.warmup_phase, scheduled_ns=now, labels=self.plan.labels)
        self._send(rec, self._data(rid), now)

    def _closed_exhausted(self) -> None:
        self.all_issued = True
        self._check_done()

    def stop(self) -> None:
        """Stop sending (Ctrl-C); requests in flight get a short grace period."""
        if not self.stopped:
            self.stopped = True
            self.not_sent += len(self.waiting)
            self.waiting.clear()
            self.all_issued = True
            self._check_done()
            if self._wake is not None:
                self._wake()

    # phases ----------------------------------------------------------------------------
    async def run_closed(self, ids: Any, clients: int, t0: int, duration_ns: int | None) -> None:
        self._closed_iter = iter(ids)
        self._closed_deadline = t0 + duration_ns if duration_ns else 0
        self.all_issued = False
        self.done.clear()
        await _sleep_until(t0, self.plan.spin_ns)
        for _ in range(clients):
            self._next_closed()
        await self._drain()
        self._closed_iter = None

    async def run_open(self, schedule: list[tuple[int, int]], t0: int) -> None:
        self.all_issued = False
        self.done.clear()
        timers = PreciseTimers.create() if self.plan.precise_timers else None
        if timers is not None:
            try:
                await self._run_open_timerfd(schedule, t0, timers)
            finally:
                timers.close()
            return
        spin = self.plan.spin_ns
        behind = 0
        dispatched = 0
        for rid, off in schedule:
            target = t0 + off
            if _now() < target:
                behind = 0
                await _sleep_until(target, spin)
            else:
                behind += 1
                if behind >= 8:  # far behind: still let responses be read now and then
                    behind = 0
                    await asyncio.sleep(0)
            if self.stopped:
                break
            dispatched += 1
            self._dispatch(rid, target)
        if self.stopped:
            self.not_sent += len(schedule) - dispatched
        self.all_issued = True
        self._check_done()
        await self._drain()

    def _dispatch(self, rid: int, target: int) -> None:
        rec = RequestRecord(rid, self.plan.worker, False, scheduled_ns=target, labels=self.plan.labels)
        if self.cap is not None and self.in_flight >= self.cap:
            self.waiting.append((rec, self._data(rid)))
        else:
            self._send(rec, self._data(rid), target)

    async def _run_open_timerfd(self, schedule: list[tuple[int, int]], t0: int, timers: PreciseTimers) -> None:
        """Open loop driven by a timerfd: every send happens in a callback at its exact instant."""
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[int] = loop.create_future()
        n = len(schedule)
        idx = 0

        def fire() -> None:
            nonlocal idx
            now = _now()
            burst = 0
            while idx < n and not self.stopped:
                rid, off = schedule[idx]
                target = t0 + off
                if target > now:
                    timers.call_at_ns(target, fire)
                    return
                self._dispatch(rid, target)
                idx += 1
                burst += 1
                if burst >= 16:  # behind schedule: let responses be read, then go on at once
                    loop.call_soon(fire)
                    return
                now = _now()
            if not finished.done():
                finished.set_result(idx)

        def wake() -> None:
            if not finished.done():
                finished.set_result(idx)

        self._wake = wake
        timers.call_at_ns(t0 + schedule[0][1] if schedule else t0, fire)
        dispatched = await finished
        self._wake = None
        if self.stopped:
            self.not_sent += n - dispatched
        self.all_issued = True
        self._check_done()
        await self._drain()

    async def _drain(self) -> None:
        timeout = self.plan.drain_timeout_s
        while not self.done.is_set():
            try:
                await asyncio.wait_for(self.done.wait(), timeout=1.0 if not self.stopped else 2.0)
            except asyncio.TimeoutError:
                if self.stopped:
                    self.client.cancel_all("stopped (Ctrl-C) before the response completed")
                    return
                timeout -= 1.0
                if timeout <= 0:
                    self.client.cancel_all("still running when the load ended")
                    return

    def tick(self) -> None:
        self.client.sweep(_now())
        if self.progress is not None:
            self.progress(self)


async def _sleep_until(target: int, spin_ns: int) -> None:
    now = _now()
    while target - now > spin_ns:
        await asyncio.sleep((target - now - spin_ns) / 1e9)
        now = _now()
    while now < target:
        await asyncio.sleep(0)
        now = _now()


async def _ticker(driver: _Driver, period_s: float) -> None:
    while True:
        await asyncio.sleep(period_s)
        driver.tick()


async def run_worker_async(
    plan: WorkerPlan,
    start: Callable[[], Any] | None = None,
    progress: Callable[[_Driver], None] | None = None,
) -> WorkerResult:
    """Prepare (encode, connect, warm up), get t0 from ``start()`` (or now + 50 ms), run, parse."""
    client = make_client(plan.backend, **plan.client_kwargs)
    encoded = [client.encode(r, r.stream) for r in plan.requests]
    journal = Journal(plan.journal_path, plan.journal_labels) if plan.journal_path else None
    driver = _Driver(plan, client, encoded, progress, journal)
    loop = asyncio.get_running_loop()
    interrupted = False

    def on_stop_signal(signum: int) -> None:
        nonlocal interrupted
        interrupted = True
        record_stop_signal(signum)
        print("\nstopping: no new requests; waiting briefly for those in flight", file=sys.stderr)
        driver.stop()

    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.getsignal(s) for s in stop_signals}
    for s in stop_signals:  # SIGTERM too: raised inside a transport callback it would be taken for a disconnect
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(s, on_stop_signal, s)
    ticker = loop.create_task(_ticker(driver, 0.25))
    journal_task = loop.create_task(journal.run(plan.journal_period_s)) if journal is not None else None
    try:
        preopen = max(plan.preopen, plan.concurrency or 0, min(plan.warmup, 64), 1)
        await client.open(preopen)
        if plan.warmup:
            driver.warmup_phase = True
            ids = _warmup_ids(plan)
            await driver.run_closed(ids, min(plan.warmup, plan.concurrency or 8), _now(), None)
            driver.warmup_phase = False
            driver.issued = driver.completed = driver.errors = 0
        if start is not None:
            t0 = await start() if asyncio.iscoroutinefunction(start) else start()
        else:
            t0 = _now() + 50_000_000
        cpu0 = time.process_time()
        if not driver.stopped:
            if plan.schedule is not None:
                await driver.run_open(plan.schedule, t0)
            else:
                if plan.closed_ids is not None:
                    ids_iter: Any = iter(plan.closed_ids)
                else:
                    ids_iter = _count_from(plan.worker, plan.closed_stride)
                await driver.run_closed(ids_iter, plan.concurrency or 1, t0, plan.duration_ns)
        cpu_s = time.process_time() - cpu0
    finally:
        ticker.cancel()
        if journal_task is not None:
            journal_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await journal_task
        if journal is not None:
            journal.close()
        for s in stop_signals:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(s)
                if previous[s] is not None:
                    signal.signal(s, previous[s])  # the CLI's own handlers, as they were
        await client.close()
    tok = None
    if plan.tokenizer:
        from pathlib import Path

        from lmmbench.datasets.perf.registry import load_tokenizer

        tok = load_tokenizer(Path(plan.tokenizer))
    records = [client.finalize(r, tok, plan.keep_text) for r in driver.records]
    for r in records:
        req = plan.requests[r.request_id % len(plan.requests)]
        r.input_tokens = req.input_tokens
        if req.labels:  # the dataset's own labels (conversation / turn, prefix group)
            r.labels = {**r.labels, **req.labels}
    opened = int(getattr(client, "connections_opened", 0))
    return WorkerResult(plan.worker, records, driver.not_sent, opened, interrupted, cpu_s)


def _warmup_ids(plan: WorkerPlan) -> list[int]:
    """Ids of the warm-up requests (negative; id i sends requests[i % len]): the last requests, or, in a
    multi-turn workload, conversations' first turns (a later turn alone is not a conversation)."""
    n = len(plan.requests)
    if not any(r.turn for r in plan.requests):
        return list(range(-plan.warmup, 0))
    firsts = [i for i, r in enumerate(plan.requests) if not r.turn]
    return [firsts[k % len(firsts)] - n * (1 + k // len(firsts)) for k in range(plan.warmup)]


def _count_from(start: int, stride: int) -> Any:
    i = start
    while True:
        yield i
        i += stride


def run_worker(
    plan: WorkerPlan,
    loop_kind: str = "auto",
    start: Callable[[], Any] | None = None,
    progress: Callable[[_Driver], None] | None = None,
) -> WorkerResult:
    """Run one worker to completion in a fresh event loop (uvloop when asked/available)."""
    coro = run_worker_async(plan, start, progress)
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()  # objects made so far never need scanning again
    gc.disable()  # a full collection over many records pauses the loop for milliseconds
    try:
        return _run_coro(coro, loop_kind)
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()


def _run_coro(coro: Any, loop_kind: str) -> WorkerResult:
    if loop_kind in ("auto", "uvloop"):
        try:
            import uvloop

            res: WorkerResult = uvloop.run(coro)
            return res
        except ImportError:
            if loop_kind == "uvloop":
                raise
    result: WorkerResult = asyncio.run(coro)
    return result
