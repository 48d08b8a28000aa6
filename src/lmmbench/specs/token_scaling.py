"""``token-scaling``: sweep frames, resolution, audio duration and text length; fit each stage.

Each sweep varies one modality's token count with the others absent, so the fit of a stage
against its own token count is not confounded: video frames (visual tokens from time), image
resolution (visual tokens from space), audio duration (audio tokens), prompt length (text
tokens). The media are generated once per seed under $LMMBENCH_HOME/media/scaling-seed<N>/.
Fits use each sample's fastest repeat (contention only adds time; the medians' fits are in the
analysis file too), over the samples where the modality is present.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from lmmbench.engines.inprocess_breakdown import SampleMedia
from lmmbench.specs.base import Case, RunOptions, SpecContext, register_spec
from lmmbench.specs.ttft_breakdown import BREAKDOWN_COLUMNS, InProcessSpec

__all__ = ["TokenScalingOptions", "TokenScalingSpec"]

_WORDS = ("the quick brown fox jumps over a lazy dog while seven bright stars shine above quiet hills").split()


class TokenScalingOptions(RunOptions):
    """Options of token-scaling: the sweep levels (empty list: skip that sweep)."""

    repeats: int = Field(3, ge=1, description="Measured repeats per sweep point.")
    interleave: bool = Field(True, description="Measure repeat 0 of every point, then repeat 1, ...")
    frames: list[int] = Field([2, 4, 8, 16, 24, 32], description="Video frame counts (video sweep).")
    image_sizes: list[int] = Field([112, 224, 336, 448], description="Square image sides in pixels.")
    audio_seconds: list[float] = Field([1.0, 2.0, 4.0, 8.0, 16.0], description="Audio durations in seconds.")
    text_words: list[int] = Field([16, 64, 256, 1024], description="Prompt lengths in words (text sweep).")


def _prompt(words: int) -> str:
    return " ".join(_WORDS[i % len(_WORDS)] for i in range(words))


def _media_dir(seed: int) -> Path:
    from lmmbench.models import lmmbench_home

    root = lmmbench_home() / "media" / f"scaling-seed{seed}"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _video(root: Path, frames: int, fps: float, seed: int) -> Path:
    from lmmbench.media.synth import write_video

    path = root / f"video_{frames}f.mp4"
    if not path.is_file():
        write_video(path, frames / fps, (160, 120), 10, seed + frames)
    return path


def _image(root: Path, side: int) -> Path:
    from PIL import Image

    from lmmbench.media.synth import _frame

    path = root / f"image_{side}.png"
    if not path.is_file():
        Image.fromarray(_frame(side, side, side, 0.25)).save(path)
    return path


def _audio(root: Path, seconds: float, seed: int) -> Path:
    import numpy as np
    import soundfile as sf

    from lmmbench.media.extract import SAMPLE_RATE_HZ
    from lmmbench.media.synth import _tone

    path = root / f"audio_{seconds:g}s.wav"
    if not path.is_file():
        sf.write(path, _tone(seconds, 440.0, np.random.default_rng(seed)), SAMPLE_RATE_HZ)
    return path


@register_spec
class TokenScalingSpec(InProcessSpec):
    """How each stage scales with its token count (expected: visual O(n), audio O(1) with padded mel features,
    prefill)."""

    name = "token-scaling"
    help = "Sweep frames / resolution / audio duration / text length and fit each stage against its tokens."
    options_model = TokenScalingOptions
    fit_stat = "min"  # the least-disturbed repeat: contention on a shared CPU only adds time
    compare_with_study = True
    columns = ("sweep", "level", *BREAKDOWN_COLUMNS)
    fit_pairs = (
        ("visual_encoder_ms", "visual_tokens"),
        ("audio_encoder_ms", "audio_tokens"),
        ("audio_feature_ms", "mel_frames"),
        ("llm_prefill_ms", "total_tokens"),
        ("prefill_ms", "total_tokens"),
        ("others_ms", "total_tokens"),
        ("ttft_ms", "total_tokens"),
    )

    def setup(self, ctx: SpecContext) -> list[Case]:
        opts = ctx.options
        assert isinstance(opts, TokenScalingOptions)
        eng = self.load(ctx)
        ref = eng.loaded.ref
        root = _media_dir(opts.seed)
        prompt = "Describe it."
        cases: list[Case] = []

        def add(sweep: str, level: Any, media: SampleMedia) -> None:
            cases.append(Case(id=f"{sweep}_{level:g}" if isinstance(level, float) else f"{sweep}_{level}",
                              group=sweep, params={"media": media}, extra={"sweep": sweep, "level": level}))

        if ref.is_multimodal:
            for n in opts.frames:
                path = _video(root, n, opts.video_fps, opts.seed)
                add("frames", n, SampleMedia(prompt=prompt, video=path, video_audio=False))
            for side in opts.image_sizes:
                add("resolution", side, SampleMedia(prompt=prompt, image=_image(root, side)))
        if ref.has_audio:
            for sec in opts.audio_seconds:
                add("audio", float(sec), SampleMedia(prompt=prompt, audio=_audio(root, sec, opts.seed)))
        for words in opts.text_words:
            add("text", words, SampleMedia(prompt=_prompt(words)))
        ctx.environment["sweeps"] = {
            "frames": opts.frames, "image_sizes": opts.image_sizes, "audio_seconds": opts.audio_seconds,
            "text_words": opts.text_words, "media_dir": str(root),
        }
        return cases[: opts.limit] if opts.limit else cases

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        eng = self.engine(ctx)
        media: SampleMedia = case.params["media"]
        if case.group == "frames":
            saved = eng.max_frames
            eng.max_frames = max(saved, int(case.extra["level"]))
            try:
                return eng.measure(media)
            finally:
                eng.max_frames = saved
        return eng.measure(media)
