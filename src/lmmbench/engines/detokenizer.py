"""Incremental detokenization with stop strings, for streaming.

The text of a request is decoded from all its output ids at each step (fast Rust decode), and only
the part that can no longer change is released: an incomplete UTF-8 sequence at the end, or a tail
that could be the start of a stop string, is held back until the next token decides it.
"""

from __future__ import annotations

from typing import Any

from lmmbench.engines.requests import RequestState

__all__ = ["Detokenizer", "held_back_chars"]


def held_back_chars(text: str, stops: list[str]) -> int:
    """How many trailing characters of ``text`` could still begin one of ``stops``."""
    hold = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return hold


class Detokenizer:
    """Turns a request's output ids into released text deltas and detects stop strings."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        # the Rust tokenizer directly (3x less overhead per call) when transformers adds nothing to it
        backend = getattr(tokenizer, "_tokenizer", None)
        cleans = getattr(tokenizer, "clean_up_tokenization_spaces", False)
        self._fast = backend.decode if backend is not None and not cleans else None

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` without special tokens."""
        if self._fast is not None:
            return str(self._fast(ids, skip_special_tokens=True))
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def update(self, state: RequestState, final: bool = False) -> tuple[str, bool]:
        """New releasable text of ``state`` and whether a stop string ended it.

        ``state.text`` becomes the text so far (cut before a stop string); ``state.emitted_chars``
        advances by the returned delta. ``final`` releases everything that is left.
        """
        text = self.decode(state.output_ids)
        stops = state.sampling.stop
        stopped = False
        if stops:
            search_from = max(0, state.emitted_chars - max(len(s) for s in stops))
            cut = -1
            for stop in stops:
                idx = text.find(stop, search_from)
                if idx >= 0 and (cut < 0 or idx < cut):
                    cut = idx
            if cut >= 0:
                text = text[:cut]
                stopped = True
        state.text = text
        if stopped or final:
            end = len(text)
        else:
            end = len(text)
            while end > state.emitted_chars and text[end - 1] == "\ufffd":
                end -= 1
            if stops:
                end = min(end, len(text) - held_back_chars(text, stops))
        end = max(end, state.emitted_chars)
        delta = text[state.emitted_chars : end]
        state.emitted_chars = end
        return delta, stopped
