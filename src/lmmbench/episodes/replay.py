"""Opt-in replay: each episode's frames written to ``<dir>/task<T>_trial<R>.mp4`` with PyAV.

An environment that can be recorded has ``render()`` returning an RGB frame (``H x W x 3`` uint8;
a ``gymnasium.Env`` made with ``render_mode="rgb_array"``, ``toy-waypoints`` built in). One frame
after ``reset`` and one after every step (warm-up steps included), so a video of an episode has
``1 + warmup_steps + steps`` frames. Frames wait in memory until their episode ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.episodes.protocols import EpisodeKey

__all__ = ["ReplayRecorder"]


class ReplayRecorder:
    """Collects frames per episode and writes one MP4 (H.264, yuv420p) per episode when it ends."""

    def __init__(self, out_dir: Path, fps: int = 10) -> None:
        self.out_dir = out_dir
        self.fps = fps
        self._frames: dict[EpisodeKey, list[Any]] = {}
        self.written: list[Path] = []

    def capture(self, key: EpisodeKey, env: Any) -> None:
        """One frame of ``env`` for episode ``key``."""
        render = getattr(env, "render", None)
        frame = render() if callable(render) else None
        if frame is None:
            raise UserError(f"--record-replay: the environment {type(env).__name__} renders no frame (give it "
                            "render() returning an RGB array, e.g. gymnasium's render_mode='rgb_array')")
        self._frames.setdefault(key, []).append(frame)

    def finish(self, key: EpisodeKey) -> Path | None:
        """Write the episode's MP4 (``task<T>_trial<R>.mp4``) and forget its frames."""
        frames = self._frames.pop(key, [])
        if not frames or key.trial < 0:  # warm-up episodes are not recorded
            return None
        import av
        import numpy as np

        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"{key.id}.mp4"
        first = np.asarray(frames[0])
        height, width = first.shape[0] - first.shape[0] % 2, first.shape[1] - first.shape[1] % 2  # yuv420p: even
        with av.open(str(path), mode="w") as container:
            stream = container.add_stream("libx264", rate=self.fps)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for frame in frames:
                rgb = np.ascontiguousarray(np.asarray(frame, dtype=np.uint8)[:height, :width, :3])
                for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        self.written.append(path)
        return path
