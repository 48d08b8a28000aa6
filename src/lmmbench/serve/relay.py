"""Hand engine events (engine thread) to per-request asyncio queues, one loop wake-up per burst.

The engine emits one event per running request per step; waking the event loop for each of them
(``call_soon_threadsafe`` writes to a pipe every time) costs more than the work itself at high
batch sizes. ``EventRelay`` collects the events of a burst and delivers them in one callback.
"""

from __future__ import annotations

import asyncio
import threading

from lmmbench.engines.requests import GenerationEvent

__all__ = ["EventRelay", "drain_merged"]


class EventRelay:
    """Thread-safe delivery of events into asyncio queues owned by ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: list[tuple[asyncio.Queue[GenerationEvent], GenerationEvent]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def push(self, queue: asyncio.Queue[GenerationEvent], event: GenerationEvent) -> None:
        """Queue ``event`` for ``queue``; callable from any thread."""
        with self._lock:
            self._pending.append((queue, event))
            if self._scheduled:
                return
            self._scheduled = True
        self.loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
            self._scheduled = False
        for queue, event in batch:
            queue.put_nowait(event)


def drain_merged(first: GenerationEvent, queue: asyncio.Queue[GenerationEvent]) -> GenerationEvent:
    """``first`` merged with every event already waiting in ``queue`` (a slow reader's backlog)."""
    event = first
    while event.output is None and not queue.empty():
        nxt = queue.get_nowait()
        event = GenerationEvent(
            event.request_id,
            event.text_delta + nxt.text_delta,
            event.new_token_ids + nxt.new_token_ids,
            nxt.completion_tokens,
            nxt.prompt_tokens,
            output=nxt.output,
        )
    return event
