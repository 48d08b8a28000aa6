"""Nanosecond-precise timers for an asyncio loop, from one Linux ``timerfd`` (no busy-waiting).

Event-loop timers wake through ``epoll_wait``'s millisecond timeout, so they fire up to ~1 ms
late. A ``timerfd`` armed at an absolute ``CLOCK_MONOTONIC`` instant (the clock behind
``time.perf_counter_ns`` on Linux) becomes readable at that instant, and the loop wakes at once
(kernel timer slack, set to 1 µs here for this process). ``PreciseTimers`` keeps a heap of
callbacks and arms the one timerfd for the earliest. Elsewhere (not Linux, no libc)
``PreciseTimers.create`` returns None and callers fall back to loop timers plus a short spin.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PreciseTimers", "timerfd_available"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
_PR_SET_TIMERSLACK = 29
_now = time.perf_counter_ns


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create  # noqa: B018  # present?
        libc.timerfd_settime  # noqa: B018
    except (OSError, AttributeError):
        return None
    if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        return None
    return libc


def timerfd_available() -> bool:
    """Whether sends can be driven by a timerfd here (Linux, libc, a CLOCK_MONOTONIC perf_counter)."""
    return _libc() is not None


class PreciseTimers:
    """Callbacks at absolute ``perf_counter_ns`` instants, all served by one timerfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: Any, fd: int) -> None:
        self.loop = loop
        self._libc = libc
        self.fd = fd
        self._heap: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = 0
        self._armed = 0
        self._spec = _Itimerspec()
        loop.add_reader(fd, self._fire)

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop | None = None) -> PreciseTimers | None:
        """A timer set for ``loop`` (the running one by default), or None where timerfd is unavailable."""
        libc = _libc()
        if libc is None:
            return None
        fd = int(libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))
        if fd < 0:
            return None
        libc.prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)  # 1 µs slack for this (load-generating) process
        return cls(loop or asyncio.get_running_loop(), libc, fd)

    def _arm(self, t_ns: int) -> None:
        t_ns = max(t_ns, 1)
        self._armed = t_ns
        v = self._spec.it_value
        v.tv_sec, v.tv_nsec = divmod(t_ns, 1_000_000_000)
        self._libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None)

    def call_at_ns(self, t_ns: int, cb: Callable[..., Any], *args: Any) -> None:
        """Run ``cb(*args)`` at ``perf_counter_ns() == t_ns`` (at once if that has passed)."""
        self._seq += 1
        heapq.heappush(self._heap, (t_ns, self._seq, cb, args))
        if not self._armed or t_ns < self._armed:
            self._arm(t_ns)

    def _fire(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self.fd, 8)
        heap = self._heap
        now = _now()
        n = 0
        while heap and heap[0][0] <= now:
            _, _, cb, args = heapq.heappop(heap)
            cb(*args)
            n += 1
            if n % 8 == 0:
                now = _now()
        if heap:
            self._arm(heap[0][0])
        else:
            self._armed = 0

    def close(self) -> None:
        """Stop serving callbacks and close the timerfd."""
        self._heap.clear()
        self.loop.remove_reader(self.fd)
        os.close(self.fd)
