"""``prefill_ms`` timed the TTFT study's way: a timer on the first thinker forward minus the encoders inside it.

The study times the thinker's first forward (its ``ThinkerPrefillCapture``) and each encoder (its
``ModuleCudaEventTimer``) and takes ``prefill = forward - visual - audio``. ``StudyPrefillTimer`` does
the same with marks of its own (``perf_counter_ns`` on CPU, CUDA events on the stream on CUDA),
independent of the span timeline, so ``prefill_study_timer_ms`` checks the span breakdown's
``prefill_ms`` from outside: it equals ``prefill_ms - prefill_outside_forward_ms`` (the rope index that
transformers 5.x computes before the forward is outside any forward timer) up to the few microseconds
between one hook's marks and the other's.

Like every hook it never changes results and never crashes a run: an exception in its own code is
logged, the timer stops for the rest of the run and its field is empty.
"""

from __future__ import annotations

import logging
from typing import Any

from lmmbench.core.clock import now_ns

__all__ = ["StudyPrefillTimer"]

log = logging.getLogger(__name__)


class StudyPrefillTimer:
    """Forward pre/post hooks on the generation model's forward and on each encoder module."""

    def __init__(self, forward_module: Any, encoders: list[Any]) -> None:
        self.forward_module = forward_module
        self.encoders = [e for e in encoders if e is not None and e is not forward_module]
        self.error: str | None = None
        self._handles: list[Any] = []
        self._use_cuda = False
        self._active = False
        self._in_forward = False
        self._start: Any = None
        self._end: Any = None
        self._open: list[Any] = []
        self._encoder_spans: list[tuple[Any, Any]] = []

    def install(self) -> None:
        """Add the hooks (after the stage hooks, so each mark lies just inside the stage span's)."""
        m = self.forward_module
        self._handles += [m.register_forward_pre_hook(self._forward_pre),
                          m.register_forward_hook(self._forward_post, always_call=True)]
        for enc in self.encoders:
            self._handles += [enc.register_forward_pre_hook(self._encoder_pre),
                              enc.register_forward_hook(self._encoder_post, always_call=True)]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def begin(self, use_cuda: bool) -> None:
        """Arm the timer for one measurement (the next forward is the first)."""
        self._use_cuda, self._active, self._in_forward = use_cuda, self.error is None, False
        self._start = self._end = None
        self._open, self._encoder_spans = [], []

    def end(self) -> None:
        self._active = self._in_forward = False

    def _mark(self) -> Any:
        if self._use_cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return now_ns()

    def _fail(self, exc: BaseException) -> None:
        self.error = f"hook 'study_prefill_timer' failed and was dropped: {type(exc).__name__}: {exc}"
        log.warning(self.error)
        self._active = self._in_forward = False
        self.remove()

    def _forward_pre(self, _mod: Any, _args: Any) -> None:
        if self._active and self._start is None:
            try:
                self._in_forward = True
                self._start = self._mark()
            except Exception as exc:
                self._fail(exc)

    def _forward_post(self, _mod: Any, _args: Any, _out: Any) -> None:
        if self._active and self._in_forward:
            try:
                self._end = self._mark()
                self._in_forward = False
            except Exception as exc:
                self._fail(exc)

    def _encoder_pre(self, _mod: Any, _args: Any) -> None:
        if self._active and self._in_forward:
            try:
                self._open.append(self._mark())
            except Exception as exc:
                self._fail(exc)

    def _encoder_post(self, _mod: Any, _args: Any, _out: Any) -> None:
        if self._active and self._in_forward and self._open:
            try:
                self._encoder_spans.append((self._open.pop(), self._mark()))
            except Exception as exc:
                self._fail(exc)

    def _ms(self, a: Any, b: Any) -> float:
        if self._use_cuda:  # the timeline's one synchronisation has happened (result_ms is read after it)
            return float(a.elapsed_time(b))
        return (int(b) - int(a)) / 1e6

    def result_ms(self) -> float | None:
        """Forward minus the encoders inside it, in ms; None when no forward was timed or the timer failed.
        Read after the measurement's synchronisation (``Timeline.resolve``)."""
        if self.error is not None or self._start is None or self._end is None:
            return None
        try:
            encoders = sum(self._ms(a, b) for a, b in self._encoder_spans)
            return self._ms(self._start, self._end) - encoders
        except Exception as exc:
            self._fail(exc)
            return None
