"""What one lmms-eval benchmark is, natively: its data set, prompt, media, answer check and aggregation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["LmmsTask", "Scored", "mean_of"]

Doc = dict[str, Any]
#: per-sample result: metric name -> value (floats for mean metrics), plus "parsed" (what was read from the answer)
Scored = dict[str, Any]


def mean_of(name: str) -> Callable[[Sequence[Scored]], dict[str, float]]:
    """An aggregation: the mean of per-sample ``name`` over the samples that have it."""

    def agg(samples: Sequence[Scored]) -> dict[str, float]:
        vals = [float(s[name]) for s in samples if name in s]
        return {name: sum(vals) / len(vals)} if vals else {}

    return agg


@dataclass(frozen=True)
class LmmsTask:
    """One benchmark as lmms-eval 0.7.3 defines it (its default prompt variant, ``lmms_eval_specific_kwargs.default``).

    ``media(doc)`` returns what goes in front of the text in the user turn: PIL images, audio dicts
    (``{"bytes", "path"}`` as `datasets` stores them undecoded) or video paths. ``score(doc, answer)`` gets
    the stripped generated text; ``aggregate`` turns the per-sample results into the task's numbers.
    """

    name: str
    dataset: str
    config: str | None
    split: str
    kind: Literal["image", "audio", "video"]
    max_new_tokens: int
    prompt: Callable[[Doc], str]
    media: Callable[[Doc], list[Any]]
    score: Callable[[Doc, str], Scored]
    aggregate: Callable[[Sequence[Scored]], dict[str, float]]
    metrics: tuple[str, ...]
    mean_metrics: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    lower_is_better: tuple[str, ...] = ()
    meta: Callable[[Doc], dict[str, Any]] = field(default=lambda doc: {})
    #: the user turn's parts in order (str: text, int: media index), when not "media first, then the text"
    layout: Callable[[Doc], list[str | int]] | None = None
    #: how the numbers were measured where a choice was made (recorded with each metric)
    notes: Callable[[], dict[str, Any]] = field(default=lambda: {})
    #: for an aggregate over part of the samples (MME: perception or cognition), the metric a sample feeds
    metric_of: Callable[[Scored], str] | None = None
    version: str = "lmms-eval-0.7.3"
    licence: str | None = None
