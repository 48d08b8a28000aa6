"""Decode media, timed: video frames + audio track with PyAV, images with Pillow, wav with soundfile.

``extract_ms`` covers reading and decoding every media file of a sample and sampling the video
frames. A file that does not decode raises ``MediaError`` (the runner records the row as failed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.clock import now_ns, ns_to_ms

__all__ = ["SAMPLE_RATE_HZ", "ExtractedAV", "MediaError", "extract_sample", "load_audio", "load_image",
           "read_video"]

SAMPLE_RATE_HZ = 16_000


class MediaError(Exception):
    """A media file exists but cannot be decoded; the sample fails with this reason."""


@dataclass
class ExtractedAV:
    """Decoded media of one sample, and how long decoding took."""

    frames: Any | None = None  # uint8 array (T, H, W, 3)
    video_fps: float = 0.0
    sampled_fps: float = 0.0
    image: Any | None = None  # PIL image
    audio: Any | None = None  # float32 mono waveform at SAMPLE_RATE_HZ
    duration: float = 0.0  # seconds: the video's length, else the audio's
    extract_ms: float = 0.0


def _resample(wave: Any, src_hz: int) -> Any:
    import numpy as np

    if src_hz == SAMPLE_RATE_HZ or wave.size == 0:
        return wave.astype(np.float32)
    n_out = round(wave.shape[0] * SAMPLE_RATE_HZ / src_hz)
    x_old = np.linspace(0.0, 1.0, wave.shape[0], endpoint=False)
    x_new = np.linspace(0.0, 1.0, n_out, endpoint=False)
    return np.interp(x_new, x_old, wave).astype(np.float32)


def read_video(path: Path, fps: float = 2.0, max_frames: int = 64, min_frames: int = 2,
               with_audio: bool = True) -> tuple[Any, float, Any | None, float]:
    """Frames sampled at ``fps`` (count rounded down to even, at least ``min_frames``), the
    stream fps, the audio track (16 kHz mono float32, or None) and the duration in seconds."""
    import av
    import numpy as np

    try:
        container = av.open(str(path))
    except Exception as exc:  # PyAV raises many types for bad files
        raise MediaError(f"{path}: cannot open video ({type(exc).__name__}: {exc})") from None
    try:
        if not container.streams.video:
            raise MediaError(f"{path}: no video stream")
        vstream = container.streams.video[0]
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(vstream)]
        if not decoded:
            raise MediaError(f"{path}: the video stream has no decodable frames")
        rate = float(vstream.average_rate or vstream.guessed_rate or 25)
        duration = len(decoded) / rate
        audio = None
        if with_audio and container.streams.audio:
            container.seek(0)
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE_HZ)
            chunks = []
            for frame in container.decode(container.streams.audio[0]):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
            if chunks:
                audio = np.concatenate(chunks).astype(np.float32)
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(f"{path}: cannot decode video ({type(exc).__name__}: {exc})") from None
    finally:
        container.close()
    n_want = int(duration * fps)
    n_want = max(min_frames, min(max_frames, n_want - n_want % 2))
    idx = np.linspace(0, len(decoded) - 1, n_want).round().astype(int)
    frames = np.stack([decoded[i] for i in idx])
    return frames, rate, audio, duration


def load_image(path: Path) -> Any:
    """An RGB PIL image; undecodable files raise ``MediaError``."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except Exception as exc:
        raise MediaError(f"{path}: cannot decode image ({type(exc).__name__}: {exc})") from None


def load_audio(path: Path) -> Any:
    """A 16 kHz mono float32 waveform; other rates are resampled, stereo is averaged."""
    import soundfile as sf

    try:
        wave, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:
        raise MediaError(f"{path}: cannot decode audio ({type(exc).__name__}: {exc})") from None
    if wave.shape[0] == 0:
        raise MediaError(f"{path}: the audio file has no samples")
    return _resample(wave.mean(axis=1), int(rate))


def extract_sample(video: Path | None, image: Path | None, audio: Path | None, *, fps: float = 2.0,
                   max_frames: int = 64, use_video_audio: bool = True) -> ExtractedAV:
    """Decode the media of one sample and time it (``extract_ms``)."""
    t0 = now_ns()
    out = ExtractedAV()
    if video is not None:
        frames, rate, track, duration = read_video(video, fps=fps, max_frames=max_frames,
                                                   with_audio=use_video_audio and audio is None)
        out.frames, out.video_fps, out.duration = frames, rate, duration
        out.sampled_fps = frames.shape[0] / duration if duration > 0 else fps
        out.audio = track
    if image is not None:
        out.image = load_image(image)
    if audio is not None:
        out.audio = load_audio(audio)
        if video is None:
            out.duration = out.audio.shape[0] / SAMPLE_RATE_HZ
    out.extract_ms = ns_to_ms(now_ns() - t0)
    return out
