"""The continuous-batching loop: scheduler + engine + sampler, with a Python API.

``BatchEngine`` ties the scheduler, the engine and the sampler together. Every ``step()``: cancelled requests leave,
the scheduler admits newcomers, the engine prefills them (their first token is sampled at once),
then one decode forward gives every running request its next token; finished requests leave the
batch at once. It runs either inline (``generate_many`` steps it in the calling thread) or in a
background thread (``start()``; the server submits from other threads and gets events back).

    engine = BatchEngine.from_model("tiny-llm", max_batch_size=16)
    outs = engine.generate_many([GenerationRequest(prompt="Hello", sampling=SamplingParams(max_tokens=8))])
    outs[0].text, outs[0].token_ids, outs[0].metrics.ttft_ms
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lmmbench.core.clock import now_ns
from lmmbench.engines.detokenizer import Detokenizer
from lmmbench.engines.requests import (
    FinishReason,
    GenerationEvent,
    GenerationOutput,
    GenerationRequest,
    PreparedInput,
    RequestState,
)
from lmmbench.engines.sampler import Sampler, TorchSampler
from lmmbench.engines.scheduler import FcfsScheduler, QueueFullError, Scheduler
from lmmbench.engines.transformers_engine import Engine

__all__ = ["BatchEngine", "ContextLengthError", "EventCallback", "QueueFullError"]

log = logging.getLogger(__name__)

EventCallback = Callable[[GenerationEvent], None]


class ContextLengthError(ValueError):
    """Prompt plus max_tokens do not fit the model's context (HTTP 400)."""


class BatchEngine:
    """Continuous batching over an ``Engine``, a ``Sampler`` and a ``Scheduler``."""

    def __init__(
        self,
        engine: Engine,
        sampler: Sampler | None = None,
        scheduler: Scheduler | None = None,
        *,
        max_batch_size: int = 16,
        max_queue: int = 256,
        max_prefill_tokens: int = 4096,
        prefill_wait_steps: int = 0,
    ) -> None:
        self.engine = engine
        self.sampler: Sampler = sampler or TorchSampler(engine.eos_token_ids)
        self.scheduler: Scheduler = scheduler or FcfsScheduler(
            max_batch_size, max_queue, max_prefill_tokens, prefill_wait_steps
        )
        self.detokenizer = Detokenizer(engine.tokenizer)
        self.running: list[RequestState] = []
        self._callbacks: dict[str, EventCallback | None] = {}
        self._cancel: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._stop = False
        self.steps = 0
        self.generated_tokens = 0
        self.process_peak_memory_bytes: int | None = None  # None until a forward's reading

    @classmethod
    def from_model(
        cls, name_or_dir: str, device: str = "cpu", dtype: str = "float32", engine: str = "transformers",
        **kwargs: Any,
    ) -> BatchEngine:  # fmt: skip
        """Load a model (built-in tiny name or local directory) with a registered engine, batched."""
        from lmmbench.engines.engine_registry import ENGINES

        return cls(ENGINES.get(engine)(name_or_dir, device, dtype), **kwargs)

    # -- submitting ---------------------------------------------------------------------------
    def prepare(self, request: GenerationRequest) -> PreparedInput:
        """Model input of ``request``, checked against the context length (no engine state touched)."""
        request.sampling.validate()
        prepared = self.engine.prepare(request)
        total = len(prepared.input_ids) + request.sampling.max_tokens
        if total > self.engine.max_context_tokens:
            raise ContextLengthError(
                f"prompt ({len(prepared.input_ids)} tokens) + max_tokens ({request.sampling.max_tokens}) "
                f"exceeds the model's context of {self.engine.max_context_tokens} tokens"
            )
        return prepared

    def submit(
        self,
        request: GenerationRequest,
        on_event: EventCallback | None = None,
        prepared: PreparedInput | None = None,
    ) -> RequestState:
        """Queue ``request``; ``on_event`` gets every step's event (called from the engine thread).

        Raises ``QueueFullError`` when the waiting queue is full, ``InputError`` /
        ``ContextLengthError`` / ``ValueError`` for bad input.
        """
        arrival = request.arrival_ns if request.arrival_ns is not None else now_ns()
        if prepared is None:
            prepared = self.prepare(request)
        state = RequestState(request=request, prepared=prepared, arrival_ns=arrival)
        with self._wake:
            self._callbacks[request.request_id] = on_event
            try:
                self.scheduler.add(state)
            except QueueFullError:
                self._callbacks.pop(request.request_id, None)
                raise
            self._wake.notify()
        return state

    def cancel(self, request_id: str) -> None:
        """Stop ``request_id`` (waiting or running); its slot is free at the next step."""
        with self._wake:
            self._cancel.add(request_id)
            self._wake.notify()

    # -- stepping -----------------------------------------------------------------------------
    def has_work(self) -> bool:
        """Whether anything is running, waiting or to be cancelled."""
        return bool(self.running or self.scheduler.num_waiting() or self._cancel)

    def _emit(self, state: RequestState, event: GenerationEvent) -> None:
        callback = self._callbacks.get(state.request_id)
        if event.finished:
            self._callbacks.pop(state.request_id, None)
        if callback is not None:
            try:
                callback(event)
            except Exception:  # a broken consumer must not stop the loop
                log.exception("event callback of %s failed", state.request_id)

    def _finish(
        self, state: RequestState, reason: FinishReason, error: str | None = None, delta: str | None = None
    ) -> GenerationEvent:
        """The last event of ``state``; ``delta`` is its released text when the caller already detokenized."""
        state.finish_reason = reason
        state.error = error
        state.finish_ns = now_ns()
        if delta is None:
            delta = self.detokenizer.update(state, final=True)[0] if reason != "error" else ""
        return GenerationEvent(
            state.request_id, delta, [], len(state.output_ids), state.prompt_tokens, output=state.to_output()
        )

    def _accept(self, state: RequestState, token: int, t_ns: int) -> GenerationEvent:
        state.output_ids.append(token)
        self.generated_tokens += 1
        if state.first_token_ns is None:
            state.first_token_ns = t_ns
        state.last_token_ns = t_ns
        params = state.sampling
        n = len(state.output_ids)
        reason: FinishReason | None = None
        if token in params.stop_token_ids or (
            token in self.engine.eos_token_ids and not params.ignore_eos and n >= params.min_tokens
        ):
            reason = "stop"
        elif n >= params.max_tokens or state.prompt_tokens + n >= self.engine.max_context_tokens:
            reason = "length"
        delta, stopped = self.detokenizer.update(state, final=reason is not None)
        if stopped and n >= params.min_tokens:
            reason = "stop"
        if reason is not None:  # the update above was final: everything left is in ``delta``
            ev = self._finish(state, reason, delta=delta)
            ev.new_token_ids = [token]
            return ev
        return GenerationEvent(state.request_id, delta, [token], n, state.prompt_tokens)

    def _fail(self, states: Sequence[RequestState], exc: BaseException) -> None:
        log.exception("engine step failed for %d request(s)", len(states))
        self.engine.release([s.request_id for s in states])
        gone = {s.request_id for s in states}
        self.running = [s for s in self.running if s.request_id not in gone]
        for s in states:
            self._emit(s, self._finish(s, "error", f"{type(exc).__name__}: {exc}"))

    def _record_logprobs(self, states: list[RequestState], logits: Any, tokens: list[int]) -> None:
        """Each asking request's chosen token's log-probability and its top ones (of the raw logits)."""
        import torch

        from lmmbench.engines.requests import TokenLogprob

        decode = self.engine.tokenizer.decode
        for i, (state, token) in enumerate(zip(states, tokens, strict=True)):
            k = state.sampling.logprobs
            if k is None:
                continue
            lp = torch.log_softmax(logits[i].float(), dim=-1)
            top = lp.topk(k) if k > 0 else None
            pairs = [] if top is None else list(zip(top.indices.tolist(), top.values.tolist(), strict=True))
            state.logprobs.append(TokenLogprob(token, decode([token]), float(lp[token]),
                                               [(int(t), decode([int(t)]), float(v)) for t, v in pairs]))  # fmt: skip

    def _advance(self, states: list[RequestState], logits: Any) -> None:
        tokens = self.sampler.sample(states, logits)
        if any(s.sampling.logprobs is not None for s in states):
            self._record_logprobs(states, logits, tokens)
        t_ns = now_ns()
        done = []
        for state, token in zip(states, tokens, strict=True):
            event = self._accept(state, token, t_ns)
            if event.finished:
                done.append(state.request_id)
            self._emit(state, event)
        if done:
            self.engine.release(done)
            gone = set(done)
            self.running = [s for s in self.running if s.request_id not in gone]

    def step(self) -> None:
        """One iteration: cancellations, admission + prefill, one decode for the whole batch."""
        with self._lock:
            cancel, self._cancel = self._cancel, set()
        for rid in cancel:
            waiting = self.scheduler.remove(rid)
            if waiting is not None:
                self._emit(waiting, self._finish(waiting, "abort"))
        gone = [s for s in self.running if s.request_id in cancel]
        if gone:
            self.engine.release([s.request_id for s in gone])
            self.running = [s for s in self.running if s.request_id not in cancel]
            for s in gone:
                self._emit(s, self._finish(s, "abort"))
        newcomers = self.scheduler.schedule(len(self.running))
        if newcomers:
            t_ns = now_ns()
            for s in newcomers:
                s.scheduled_ns = t_ns
            self.running.extend(newcomers)
            try:
                logits = self.engine.prefill(newcomers)
                self._sample_memory(newcomers)  # before a request that ends here is answered
                self._advance(newcomers, logits)
            except Exception as exc:
                self._fail([s for s in newcomers if s.finish_reason is None], exc)
        if self.running:
            batch = list(self.running)
            try:
                logits = self.engine.decode(batch)
                self._sample_memory(batch)
                self._advance(batch, logits)
            except Exception as exc:
                self._fail([s for s in batch if s.finish_reason is None], exc)
        self.steps += 1

    def _sample_memory(self, states: list[RequestState]) -> None:
        """Memory in use right after a forward, into the peak of the engine and of each request in it (a reading
        that fails leaves them unmeasured)."""
        try:
            memory = int(self.engine.memory_bytes())
        except Exception:  # a profiling read never fails a request
            return
        self.process_peak_memory_bytes = max(self.process_peak_memory_bytes or 0, memory)
        for s in states:
            s.process_peak_memory_bytes = max(s.process_peak_memory_bytes or 0, memory)

    # -- running ------------------------------------------------------------------------------
    def start(self) -> None:
        """Run the loop in a daemon thread until ``stop()``."""
        if self._thread is not None:
            return
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="lmmbench-batch-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the background loop (running requests are left unfinished)."""
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stop and not self.has_work():
                    self._wake.wait(0.5)
                if self._stop:
                    return
            try:
                self.step()
            except Exception:  # never let the loop die
                log.exception("batch engine step failed")

    def generate_many(
        self,
        requests: Iterable[GenerationRequest],
        on_output: Callable[[GenerationOutput], None] | None = None,
    ) -> list[GenerationOutput]:
        """Run ``requests`` to completion, batched; outputs in request order.

        A request with bad input gets an output with ``finish_reason == "error"`` and its reason in
        ``error``; the others go on. ``on_output`` is called as each request finishes (in finish
        order), so a caller can write results as they are produced.
        """
        reqs = list(requests)
        outputs: dict[str, GenerationOutput] = {}
        done = threading.Condition()

        def collect(event: GenerationEvent) -> None:
            if event.output is not None:
                with done:
                    outputs[event.request_id] = event.output
                    done.notify_all()
                if on_output is not None:
                    on_output(event.output)

        pending = deque(reqs)
        while pending or len(outputs) < len(reqs):
            while pending and self.scheduler.has_room():
                req = pending.popleft()
                try:
                    self.submit(req, collect)
                except QueueFullError:
                    pending.appendleft(req)
                    break
                except ValueError as exc:  # InputError, ContextLengthError, bad sampling values
                    now = now_ns()
                    state = RequestState(req, PreparedInput([]), arrival_ns=req.arrival_ns or now)
                    state.finish_ns = now
                    state.finish_reason, state.error = "error", str(exc)
                    collect(GenerationEvent(req.request_id, "", [], 0, 0, output=state.to_output()))
            if self._thread is None:
                if self.has_work():
                    self.step()
            else:
                with done:
                    done.wait(0.05)
        return [outputs[r.request_id] for r in reqs]

    def generate(self, request: GenerationRequest) -> GenerationOutput:
        """Run one request to completion."""
        return self.generate_many([request])[0]
