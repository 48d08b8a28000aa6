"""A timeline of nested spans: CUDA events on a CUDA device, ``perf_counter_ns`` on CPU.

Every span boundary is a *mark*. On CPU a mark is ``time.perf_counter_ns()``; on CUDA it is a
``torch.cuda.Event(enable_timing=True)`` recorded on the current stream, so the GPU work of the
span is included without synchronising inside the hot path. ``resolve()`` synchronises ONCE, at
the end of a measurement, and turns every mark into milliseconds since the first mark.

Spans nest by a stack: a span opened while another is open is its child. A span's *exclusive*
time is its duration minus its direct children; summing exclusive times over every span of a
tree gives back the root duration exactly, which is what makes a stage breakdown add up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from lmmbench.core.clock import now_ns

__all__ = ["CPU_TIMER", "CUDA_TIMER", "ResolvedSpan", "Timeline"]

log = logging.getLogger(__name__)

CPU_TIMER = "perf_counter_ns"
CUDA_TIMER = "cuda_event"


@dataclass
class _Span:
    category: str
    start: int
    parent: int
    end: int = -1
    children: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ResolvedSpan:
    """A closed span with its times in milliseconds."""

    category: str
    start_ms: float
    end_ms: float
    exclusive_ms: float
    depth: int

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


class Timeline:
    """Marks and nested spans of one measurement."""

    def __init__(self, use_cuda: bool = False) -> None:
        self.use_cuda = use_cuda
        self.timer_kind = CUDA_TIMER if use_cuda else CPU_TIMER
        self._marks: list[Any] = []
        self._spans: list[_Span] = []
        self._stack: list[int] = []
        from lmmbench.profiling.trace_ranges import current_ranges

        self._ranges = current_ranges()  # a profiler capture in progress: spans become trace ranges
        if use_cuda:
            import torch

            self._event_cls: Any = torch.cuda.Event
            self._sync: Any = torch.cuda.synchronize

    def mark(self) -> int:
        """Record a time point; returns its index."""
        if self.use_cuda:
            ev = self._event_cls(enable_timing=True)
            ev.record()
            self._marks.append(ev)
        else:
            self._marks.append(now_ns())
        return len(self._marks) - 1

    def open(self, category: str) -> int:
        """Open a span as a child of the innermost open span; returns its id."""
        parent = self._stack[-1] if self._stack else -1
        sid = len(self._spans)
        self._spans.append(_Span(category, self.mark(), parent))
        if parent >= 0:
            self._spans[parent].children.append(sid)
        self._stack.append(sid)
        if self._ranges is not None:
            self._ranges.push(category)
        return sid

    def close(self, sid: int) -> None:
        """Close span ``sid`` and any span still open inside it (they end at the same mark)."""
        if sid not in self._stack:
            return
        end = self.mark()
        while self._stack:
            top = self._stack.pop()
            if self._ranges is not None:
                self._ranges.pop()
            self._spans[top].end = end
            if top == sid:
                break

    def top_category(self) -> str | None:
        """The category of the innermost open span."""
        return self._spans[self._stack[-1]].category if self._stack else None

    def close_all(self) -> None:
        """Close every open span (used when a measurement ends abnormally)."""
        if self._stack:
            self.close(self._stack[0])

    def resolve(self) -> list[ResolvedSpan]:
        """Synchronise once (CUDA) and return every span, in opening order."""
        self.close_all()
        if not self._marks:
            return []
        if self.use_cuda:
            self._sync()
            first = self._marks[0]
            times = [0.0] + [float(first.elapsed_time(ev)) for ev in self._marks[1:]]
        else:
            t0 = self._marks[0]
            times = [(t - t0) / 1e6 for t in self._marks]
        out: list[ResolvedSpan] = []
        depth: dict[int, int] = {}
        for sid, span in enumerate(self._spans):
            depth[sid] = 0 if span.parent < 0 else depth[span.parent] + 1
            start, end = times[span.start], times[span.end]
            child_ms = sum(times[self._spans[c].end] - times[self._spans[c].start] for c in span.children)
            out.append(ResolvedSpan(span.category, start, end, end - start - child_ms, depth[sid]))
        return out
