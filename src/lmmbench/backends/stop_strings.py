"""lm-eval's ``until``: generated text cut before the first stop string, shared by every scoring backend."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cut_at_stop"]


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The text before the first occurrence of any stop string (lm-eval's ``until``)."""
    for s in stop:
        if s:
            text = text.split(s)[0]
    return text
