"""The media guard: did every medium of an input reach the model?

A processor that ignores a medium still returns ``input_ids``: a tokenizer standing in for a
processor leaves the lone, unexpanded placeholder token of a video or image (1 token) and no
audio features. So: a video or image yields more than one token of its kind, audio yields
audio tokens and mel frames; otherwise the input is refused with the medium and the processor
class named. Used by the processor probe, the TTFT breakdown rows, ``serve`` and in-process eval.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MediaNotReachedError", "media_shortfall", "media_token_counts", "require_media_tokens"]

_TOKEN_ATTRS = {"image": "image_token_id", "video": "video_token_id", "audio": "audio_token_id"}


class MediaNotReachedError(ValueError):
    """A medium of an input yielded no tokens for the model (the processor ignored it)."""


def _token_id(attr: str, owners: tuple[Any, ...]) -> int | None:
    for owner in owners:
        value = getattr(owner, attr, None)
        if isinstance(value, int):
            return value
    return None


def media_token_counts(inputs: Any, tokenizer: Any, processor: Any = None) -> dict[str, int]:
    """image / video / audio token counts of ``inputs['input_ids']`` (batch of one) and its mel frames."""
    ids = inputs["input_ids"]
    if hasattr(ids, "ndim") and ids.ndim == 2:
        ids = ids[0]
    seq = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    owners = tuple(o for o in (processor, tokenizer) if o is not None)
    counts: dict[str, int] = {}
    for medium, attr in _TOKEN_ATTRS.items():
        tok = _token_id(attr, owners)
        counts[f"{medium}_tokens"] = sum(1 for t in seq if t == tok) if tok is not None else 0
    mel = inputs.get("input_features") if hasattr(inputs, "get") else None
    counts["mel_frames"] = int(mel.shape[-1]) if mel is not None else 0
    return counts


def media_shortfall(counts: dict[str, int], expected: dict[str, bool], processor_class: str) -> str | None:
    """Why an input whose media are ``expected`` did not reach the model, or None when it did."""
    for medium in ("video", "image"):
        n = counts.get(f"{medium}_tokens", 0)
        if expected.get(medium) and n <= 1:
            what = "the unexpanded placeholder" if n == 1 else "no placeholder"
            return (f"{medium}: processor {processor_class} yielded {n} {medium} token(s) ({what}), "
                    f"not the expanded visual tokens: the {medium} did not reach the model")
    if expected.get("audio"):
        n, mel = counts.get("audio_tokens", 0), counts.get("mel_frames", 0)
        if n <= 0 or mel <= 0:
            return (f"audio: processor {processor_class} yielded {n} audio token(s) and {mel} mel frame(s): "
                    "the audio did not reach the model")
    return None


def require_media_tokens(inputs: Any, tokenizer: Any, processor: Any, expected: dict[str, bool]) -> dict[str, int]:
    """The counts of ``inputs``; ``MediaNotReachedError`` when an expected medium yielded no tokens."""
    counts = media_token_counts(inputs, tokenizer, processor)
    reason = media_shortfall(counts, expected, type(processor).__name__)
    if reason:
        raise MediaNotReachedError(reason)
    return counts
