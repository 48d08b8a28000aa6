"""Turn decoded media and a prompt into model inputs, timed: ``pack_ms`` and ``audio_feature_ms``.

``pack_ms`` covers the chat template, image / video preprocessing and tokenisation;
``audio_feature_ms`` is the time spent in the processor's feature extractor (mel features),
measured by a transparent proxy around it, so the processor runs exactly as users run it
(Qwen2.5-Omni's processor pads audio to 300 s of mel frames: that default is kept and the
resulting ``mel_frames`` are recorded).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from lmmbench.core.clock import TimedCallable, now_ns, ns_to_ms
from lmmbench.media.extract import SAMPLE_RATE_HZ, ExtractedAV

__all__ = [
    "PackedInputs",
    "TokenStats",
    "chat_text",
    "media_conversation",
    "pack_inputs",
    "timed_feature_extractor",
    "token_stats",
]


@dataclass
class TokenStats:
    """Prompt token counts by modality."""

    visual_tokens: int
    audio_tokens: int
    text_tokens: int
    total_tokens: int


@dataclass
class PackedInputs:
    """Model inputs (a BatchFeature / dict of CPU tensors) and the time it took to build them."""

    inputs: Any
    pack_ms: float
    audio_feature_ms: float
    mel_frames: int
    mel_valid_frames: int
    prompt_text: str



def media_conversation(prompt: str, av: ExtractedAV) -> list[dict[str, Any]]:
    """One user turn: a placeholder per medium ``av`` holds (video, image, audio), then the prompt."""
    content: list[dict[str, Any]] = []
    if av.frames is not None:
        content.append({"type": "video"})
    if av.image is not None:
        content.append({"type": "image"})
    if av.audio is not None:
        content.append({"type": "audio"})
    content.append({"type": "text", "text": prompt})
    return [{"role": "user", "content": content}]


def chat_text(owner: Any, conversation: list[dict[str, Any]]) -> str:
    """``conversation`` rendered by the chat template of ``owner`` (processor or tokenizer), with the
    generation prompt."""
    text = owner.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    return text if isinstance(text, str) else str(text[0])


@contextmanager
def timed_feature_extractor(processor: Any) -> Iterator[TimedCallable | None]:
    """Swap ``processor.feature_extractor`` for a ``TimedCallable`` proxy for the ``with`` block
    (``None`` when the processor has none); the original is put back on exit."""
    fe = getattr(processor, "feature_extractor", None)
    if fe is None:
        yield None
        return
    timed = TimedCallable(fe)
    processor.feature_extractor = timed
    try:
        yield timed
    finally:
        processor.feature_extractor = fe


def pack_inputs(processor: Any, tokenizer: Any, prompt: str, av: ExtractedAV,
                audio_kwargs: dict[str, Any] | None = None) -> PackedInputs:
    """Build model inputs with the model's own processor (or tokenizer for text models)."""
    t0 = now_ns()
    if processor is None:
        if av.frames is not None or av.image is not None or av.audio is not None:
            raise ValueError("this is a text-only model: the sample has media; use a text manifest row")
        text = chat_text(tokenizer, [{"role": "user", "content": prompt}])
        inputs = tokenizer(text, return_tensors="pt")
        return PackedInputs(inputs, ns_to_ms(now_ns() - t0), 0.0, 0, 0, text)
    # a vision-language processor (no feature extractor) takes no audio input
    if getattr(processor, "feature_extractor", None) is None and av.audio is not None:
        av = replace(av, audio=None)
    text = chat_text(processor, media_conversation(prompt, av))
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if av.frames is not None:
        kwargs["videos"] = [av.frames]
        if av.sampled_fps:
            kwargs["videos_kwargs"] = {"fps": av.sampled_fps}
    if av.image is not None:
        kwargs["images"] = [av.image]
    if av.audio is not None:
        kwargs["audio"] = [av.audio]
        kwargs["audio_kwargs"] = {"sampling_rate": SAMPLE_RATE_HZ, **(audio_kwargs or {})}
    with timed_feature_extractor(processor) as timed:
        inputs = processor(**kwargs)
    total_ms = ns_to_ms(now_ns() - t0)
    audio_ms = ns_to_ms(timed.elapsed_ns) if timed is not None else 0.0
    mel = inputs.get("input_features")
    mask = inputs.get("feature_attention_mask")
    mel_frames = int(mel.shape[-1]) if mel is not None else 0
    mel_valid = int(mask.sum()) if mask is not None else mel_frames
    return PackedInputs(inputs, total_ms - audio_ms, audio_ms, mel_frames, mel_valid, text)


def token_stats(input_ids: Any, tokenizer: Any) -> TokenStats:
    """Count visual (image + video), audio and text tokens in ``input_ids`` (batch of one)."""
    ids = input_ids[0] if getattr(input_ids, "ndim", 1) == 2 else input_ids

    def count(attr: str) -> int:
        tok_id = getattr(tokenizer, attr, None)
        return int((ids == tok_id).sum()) if isinstance(tok_id, int) else 0

    visual = count("image_token_id") + count("video_token_id")
    audio = count("audio_token_id")
    total = int(ids.shape[0])
    return TokenStats(visual, audio, total - visual - audio, total)
