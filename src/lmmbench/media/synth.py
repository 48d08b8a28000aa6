"""A reproducible synthetic media set: mp4 videos with an audio track, images, wav files, a manifest.

Everything is generated from a seed with NumPy and written with PyAV / Pillow / soundfile, so
the same seed gives the same pixels and samples (mp4 bytes may differ across codec builds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.media.extract import SAMPLE_RATE_HZ
from lmmbench.media.manifest import write_manifest

__all__ = ["SynthConfig", "synth_media"]



@dataclass(frozen=True)
class SynthConfig:
    """What to generate: video durations (s), image sizes, wav durations (s)."""

    video_durations_s: tuple[float, ...] = (1.0, 2.0, 4.0)
    video_size: tuple[int, int] = (160, 120)
    video_fps: int = 10
    image_sizes: tuple[tuple[int, int], ...] = ((224, 224),)
    audio_durations_s: tuple[float, ...] = (6.0, 12.0)
    seed: int = 0


def _tone(duration_s: float, freq_hz: float, rng: Any) -> Any:
    import numpy as np

    t = np.arange(int(duration_s * SAMPLE_RATE_HZ), dtype=np.float32) / SAMPLE_RATE_HZ
    wave = 0.3 * np.sin(2 * np.pi * freq_hz * t) + 0.02 * rng.standard_normal(t.shape).astype(np.float32)
    return wave.astype(np.float32)


def _frame(idx: int, width: int, height: int, phase: float) -> Any:
    import numpy as np

    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    r = (np.sin(2 * np.pi * (x + idx * 0.05 + phase)) * 0.5 + 0.5) * np.ones_like(y)
    g = (np.cos(2 * np.pi * (y + idx * 0.03)) * 0.5 + 0.5) * np.ones_like(x)
    b = ((x + y + idx * 0.02) % 1.0).astype(np.float32)
    return (np.stack([r, g, b], axis=-1) * 255).astype(np.uint8)


def write_video(path: Path, duration_s: float, size: tuple[int, int], fps: int, seed: int) -> Path:
    """Write an H.264 mp4 with an AAC mono 16 kHz audio track (a tone plus noise)."""
    import av
    import numpy as np

    rng = np.random.default_rng(seed)
    width, height = size
    n_frames = max(1, round(duration_s * fps))
    audio = _tone(duration_s, 220.0 + 110.0 * (seed % 5), rng)
    with av.open(str(path), mode="w") as container:
        vstream = container.add_stream("libx264", rate=fps)
        vstream.width, vstream.height, vstream.pix_fmt = width, height, "yuv420p"
        vstream.options = {"preset": "ultrafast", "crf": "28"}
        astream = container.add_stream("aac", rate=SAMPLE_RATE_HZ)
        astream.layout = "mono"
        phase = float(rng.random())
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(_frame(i, width, height, phase), format="rgb24")
            for packet in vstream.encode(frame):
                container.mux(packet)
        for packet in vstream.encode():
            container.mux(packet)
        chunk = 1024
        for start in range(0, audio.shape[0], chunk):
            piece = audio[start : start + chunk]
            aframe = av.AudioFrame.from_ndarray(piece[None, :], format="flt", layout="mono")
            aframe.sample_rate = SAMPLE_RATE_HZ
            aframe.pts = start
            for packet in astream.encode(aframe):
                container.mux(packet)
        for packet in astream.encode():
            container.mux(packet)
    return path


def synth_media(out_dir: str | Path, config: SynthConfig | None = None) -> Path:
    """Write the synthetic set under ``out_dir`` and return the path of its ``manifest.csv``."""
    import numpy as np
    import soundfile as sf
    from PIL import Image

    cfg = config or SynthConfig()
    root = Path(out_dir)
    for sub in ("video", "image", "audio"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []
    for i, dur in enumerate(cfg.video_durations_s):
        name = f"video/clip_{dur:g}s.mp4"
        write_video(root / name, dur, cfg.video_size, cfg.video_fps, cfg.seed + i)
        rows.append(
            {
                "id": f"video_{dur:g}s",
                "video": name,
                "prompt": "Describe what you see and hear in this clip.",
                "group": "video+audio",
                "duration_s": f"{dur:g}",
            }
        )
    rng = np.random.default_rng(cfg.seed)
    for j, (w, h) in enumerate(cfg.image_sizes):
        name = f"image/image_{w}x{h}.png"
        Image.fromarray(_frame(j, w, h, float(rng.random()))).save(root / name)
        wav = cfg.audio_durations_s[0] if cfg.audio_durations_s else 0.0
        row = {"id": f"image_{w}x{h}", "image": name, "prompt": "What is in this picture?", "group": "image"}
        if wav:
            aname = f"audio/tone_{wav:g}s.wav"
            sf.write(root / aname, _tone(wav, 330.0, rng), SAMPLE_RATE_HZ)
            row.update(audio=aname, group="image+audio", prompt="What is in this picture and this sound?")
        rows.append(row)
    for k, dur in enumerate(cfg.audio_durations_s):
        name = f"audio/tone_{dur:g}s.wav"
        if not (root / name).exists():
            sf.write(root / name, _tone(dur, 440.0 + 50 * k, rng), SAMPLE_RATE_HZ)
        rows.append(
            {"id": f"audio_{dur:g}s", "audio": name, "prompt": "What do you hear?", "group": "audio",
             "duration_s": f"{dur:g}"}
        )
    manifest = write_manifest(root / "manifest.csv", rows)
    (root / "synth.json").write_text(json.dumps({"seed": cfg.seed, "config": repr(cfg)}, indent=2))
    return manifest
