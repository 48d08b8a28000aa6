"""The scheduler of the scheduler / engine / sampler split: a bounded waiting queue and per-step admission.

At every step the batching loop asks the scheduler which waiting requests join the running batch.
``FcfsScheduler`` admits in arrival order while there are free batch slots and the step's prefill
token budget lasts (the first newcomer is always admitted, so a long prompt is never starved). The
budget bounds how long running requests wait for newcomers' prefill: one step at most.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Protocol

from lmmbench.engines.requests import RequestState

__all__ = ["FcfsScheduler", "QueueFullError", "Scheduler"]


class QueueFullError(RuntimeError):
    """The waiting queue is at its bound; the caller should retry later (HTTP 429)."""


class Scheduler(Protocol):
    """Waiting queue and admission policy (thread-safe: ``add`` comes from other threads)."""

    max_batch_size: int

    def add(self, state: RequestState) -> None:
        """Queue ``state``; ``QueueFullError`` when the queue is full."""
        ...

    def remove(self, request_id: str) -> RequestState | None:
        """Take a waiting request out of the queue (cancelled); None if it is not waiting."""
        ...

    def schedule(self, num_running: int) -> list[RequestState]:
        """The waiting requests that join the running batch at this step, in order."""
        ...

    def num_waiting(self) -> int:
        """Requests in the waiting queue."""
        ...

    def has_room(self) -> bool:
        """Whether ``add`` would accept one more request now."""
        ...


class FcfsScheduler:
    """First come, first served, with a bounded queue and a prefill token budget per step."""

    def __init__(
        self,
        max_batch_size: int = 16,
        max_queue: int = 256,
        max_prefill_tokens: int = 4096,
        prefill_wait_steps: int = 0,
    ) -> None:
        if max_batch_size < 1 or max_queue < 0 or max_prefill_tokens < 1 or prefill_wait_steps < 0:
            raise ValueError("max_batch_size >= 1, max_queue >= 0, max_prefill_tokens >= 1, prefill_wait_steps >= 0")
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.max_prefill_tokens = max_prefill_tokens
        # while requests run, newcomers may wait up to this many steps so that several share one prefill
        self.prefill_wait_steps = prefill_wait_steps
        self._waiting: deque[RequestState] = deque()
        self._arrival_step: dict[str, int] = {}
        self._step = 0
        self._lock = threading.Lock()

    def add(self, state: RequestState) -> None:
        """Queue ``state`` or raise ``QueueFullError``."""
        with self._lock:
            if len(self._waiting) >= self.max_queue:
                raise QueueFullError(f"waiting queue is full ({self.max_queue} requests)")
            self._waiting.append(state)
            self._arrival_step[state.request_id] = self._step

    def remove(self, request_id: str) -> RequestState | None:
        """Take ``request_id`` out of the queue if it is still waiting."""
        with self._lock:
            for state in self._waiting:
                if state.request_id == request_id:
                    self._waiting.remove(state)
                    self._arrival_step.pop(request_id, None)
                    return state
        return None

    def schedule(self, num_running: int) -> list[RequestState]:
        """Newcomers for this step: free slots, prefill token budget, arrival order."""
        out: list[RequestState] = []
        budget = self.max_prefill_tokens
        with self._lock:
            self._step += 1
            free = self.max_batch_size - num_running
            if self.prefill_wait_steps and num_running and self._waiting and len(self._waiting) < free:
                oldest = self._arrival_step.get(self._waiting[0].request_id, self._step)
                if self._step - oldest < self.prefill_wait_steps:
                    return out  # let a few more arrive; they will share one prefill forward
            while self._waiting and num_running + len(out) < self.max_batch_size:
                cost = self._waiting[0].prompt_tokens
                if out and cost > budget:
                    break
                state = self._waiting.popleft()
                self._arrival_step.pop(state.request_id, None)
                out.append(state)
                budget -= cost
        return out

    def num_waiting(self) -> int:
        """Requests in the waiting queue."""
        return len(self._waiting)

    def has_room(self) -> bool:
        """Whether one more request fits in the queue."""
        return len(self._waiting) < self.max_queue
