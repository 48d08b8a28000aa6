"""In-process measurement of one sample: decode (extract_ms) -> pack (pack_ms, audio_feature_ms)
-> media guard -> ``generate(max_new_tokens=1)`` with stage hooks -> one row of the TTFT breakdown fields.

Measured or refused: a sample whose video / image / audio yields no tokens for the model raises
``MediaNotReachedError`` (its row fails, naming the medium and the processor class); once a hook
has been dropped, its stage is empty (None) on every later row, which says ``status=degraded``
with the hook's error.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.engines.breakdown import BreakdownResult, run_generate_with_breakdown
from lmmbench.media.extract import ExtractedAV, extract_sample
from lmmbench.media.pack import PackedInputs, pack_inputs, token_stats
from lmmbench.models.media_check import require_media_tokens
from lmmbench.profiling.hooks import StageHooks
from lmmbench.profiling.stages import TTFT_STAGES
from lmmbench.profiling.timeline import CPU_TIMER, CUDA_TIMER

__all__ = ["BREAKDOWN_FIELDS", "InProcessBreakdown", "SampleMedia"]

# the field names of the timing standard (docs/ttft-breakdown.md), in its order
BREAKDOWN_FIELDS = (
    "extract_ms",
    "pack_ms",
    "audio_feature_ms",
    "preprocess_ms",
    *TTFT_STAGES,
    "visual_tokens",
    "audio_tokens",
    "text_tokens",
    "total_tokens",
    "duration",
    "mel_frames",
)


@dataclass
class SampleMedia:
    """What one sample is made of: a prompt and optional media paths."""

    prompt: str
    video: Path | None = None
    image: Path | None = None
    audio: Path | None = None
    video_audio: bool = True  # use the video's audio track when no audio file is given
    audio_kwargs: dict[str, Any] = field(default_factory=dict)


class InProcessBreakdown:
    """A loaded model with stage hooks installed, measuring samples one at a time."""

    def __init__(self, loaded: Any, hooks: bool = True, video_fps: float = 2.0, max_frames: int = 64) -> None:
        self.loaded = loaded
        self.device = loaded.device
        layout = loaded.ref.record.hook_layout
        self.hooks: StageHooks | None = StageHooks(loaded.model, layout).install() if hooks else None
        self.video_fps = video_fps
        self.max_frames = max_frames
        # Everything made so far (the model, torch's and transformers' module objects: ~390,000 for tiny-omni) lives
        # for the whole run: frozen, the collection between repeats scans only what the repeats made (3.9 s per
        # collection -> under 1 ms at load 17 on a 2-core EPYC; 30 collections in README command 1's run).
        gc.collect()
        gc.freeze()

    @property
    def timer_kind(self) -> str:
        return CUDA_TIMER if getattr(self.device, "type", "") == "cuda" else CPU_TIMER

    def close(self) -> None:
        """Remove the hooks (the model is left exactly as loaded); the objects frozen at the start are collectable
        again."""
        if self.hooks is not None:
            self.hooks.remove()
        gc.unfreeze()

    def clear_cache(self) -> None:
        """Between repeats: collect garbage; on CUDA, empty the cache and reset the peak-memory stats."""
        gc.collect()
        if getattr(self.device, "type", "") == "cuda":
            import torch

            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def extract(self, media: SampleMedia) -> ExtractedAV:
        return extract_sample(
            media.video,
            media.image,
            media.audio,
            fps=self.video_fps,
            max_frames=self.max_frames,
            use_video_audio=media.video_audio,
        )

    def pack(self, media: SampleMedia, av: ExtractedAV) -> PackedInputs:
        return pack_inputs(self.loaded.processor, self.loaded.tokenizer, media.prompt, av, media.audio_kwargs)

    def measure(self, media: SampleMedia) -> dict[str, Any]:
        """One full measurement of a sample: every TTFT breakdown field, the split of others, metadata."""
        av = self.extract(media)
        packed = self.pack(media, av)
        self.check_media(av, packed)
        result = self.generate(packed)
        stats = token_stats(packed.inputs["input_ids"], self.loaded.tokenizer)
        row: dict[str, Any] = {
            "extract_ms": av.extract_ms,
            "pack_ms": packed.pack_ms,
            "audio_feature_ms": packed.audio_feature_ms,
            "preprocess_ms": av.extract_ms + packed.pack_ms + packed.audio_feature_ms,
            **result.measured_fields(),
            "visual_tokens": stats.visual_tokens,
            "audio_tokens": stats.audio_tokens,
            "text_tokens": stats.text_tokens,
            "total_tokens": stats.total_tokens,
            "duration": av.duration,
            "mel_frames": packed.mel_frames,
            "mel_valid_frames": packed.mel_valid_frames,
            "video_frames": int(av.frames.shape[0]) if av.frames is not None else 0,
            "ttft_wall_ms": result.ttft_wall_ms,
            "timer": result.timer,
            "first_token_id": int(result.output_ids[0, -1]),
        }
        if result.hook_errors:
            row["hook_errors"] = "; ".join(result.hook_errors)
        if result.dropped:  # the input reached the model; only these stages went unmeasured
            row["hook_errors"] = "; ".join(result.dropped.values())
            row.update(status="degraded", error=row["hook_errors"])
        return row

    def check_media(self, av: ExtractedAV, packed: PackedInputs) -> None:
        """``MediaNotReachedError`` unless every medium of ``av`` yielded tokens (and audio mel frames)."""
        expected = {"video": av.frames is not None, "image": av.image is not None, "audio": av.audio is not None}
        if not any(expected.values()) or self.loaded.processor is None:
            return
        require_media_tokens(packed.inputs, self.loaded.tokenizer, self.loaded.processor, expected)

    def generate(self, packed: PackedInputs) -> BreakdownResult:
        return run_generate_with_breakdown(self.loaded.model, packed.inputs, self.device, self.hooks)
