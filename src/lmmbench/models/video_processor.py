"""A NumPy/PIL video processor with Qwen2-VL's patch layout, for machines without torchvision.

transformers' ``BaseVideoProcessor`` needs torchvision; this subclass of ``VideoProcessorMixin``
resizes frames with PIL (bicubic, like the image path), rescales, normalises and patchifies
with NumPy into ``pixel_values_videos`` of shape (grid_t*grid_h*grid_w, C*tp*p*p) and
``video_grid_thw``. It derives from ``VideoProcessorMixin`` where transformers has it (5.2x) and
from ``BaseImageProcessor`` otherwise (5.17). Frames arrive already sampled (``media.extract`` does the sampling).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from transformers.feature_extraction_utils import BatchFeature

try:  # transformers >= 5.2x: the torchvision-free base of video processors
    from transformers.video_processing_utils import VideoProcessorMixin as _VideoProcessorBase
except ImportError:  # transformers 5.17 has no such class: the image processor base gives the same API
    from transformers.image_processing_utils import BaseImageProcessor as _VideoProcessorBase

__all__ = ["NumpyQwenVideoProcessor", "smart_resize"]

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Height and width divisible by ``factor``, pixel count within bounds, aspect kept."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class NumpyQwenVideoProcessor(_VideoProcessorBase):  # type: ignore[misc]
    """Qwen2-VL / Qwen2.5-VL / Qwen2.5-Omni video preprocessing without torchvision."""

    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(
        self,
        patch_size: int = 14,
        temporal_patch_size: int = 2,
        merge_size: int = 2,
        min_pixels: int = 128 * 28 * 28,
        max_pixels: int = 768 * 28 * 28,
        image_mean: list[float] | None = None,
        image_std: list[float] | None = None,
        fps: float = 2.0,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("size", None)
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.temporal_patch_size = temporal_patch_size
        self.merge_size = merge_size
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        self.image_mean = image_mean or list(_CLIP_MEAN)
        self.image_std = image_std or list(_CLIP_STD)
        self.fps = fps

    def __call__(self, videos: Any, **kwargs: Any) -> BatchFeature:
        return self.preprocess(videos, **kwargs)

    def _resized_hw(self, height: int, width: int, size: Any = None) -> tuple[int, int]:
        min_px, max_px = self.min_pixels, self.max_pixels
        if isinstance(size, dict):
            min_px = int(size.get("shortest_edge", min_px))
            max_px = int(size.get("longest_edge", max_px))
        return smart_resize(height, width, self.patch_size * self.merge_size, min_px, max_px)

    def _one_video(self, frames: np.ndarray, size: Any) -> tuple[np.ndarray, list[int]]:
        from PIL import Image

        if frames.ndim != 4:
            raise ValueError(f"a video must be (frames, height, width, channels), got shape {frames.shape}")
        if frames.shape[-1] != 3 and frames.shape[1] == 3:
            frames = frames.transpose(0, 2, 3, 1)
        t, h, w, _ = frames.shape
        rh, rw = self._resized_hw(h, w, size)
        resized = np.stack(
            [np.asarray(Image.fromarray(f.astype(np.uint8)).resize((rw, rh), Image.Resampling.BICUBIC)) for f in frames]
        ).astype(np.float32)
        mean = np.asarray(self.image_mean, dtype=np.float32)
        std = np.asarray(self.image_std, dtype=np.float32)
        x = (resized / 255.0 - mean) / std  # (t, h, w, c)
        x = x.transpose(0, 3, 1, 2)  # (t, c, h, w)
        tp, p, m = self.temporal_patch_size, self.patch_size, self.merge_size
        if pad := -t % tp:
            x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)], axis=0)
            t += pad
        c = x.shape[1]
        gt, gh, gw = t // tp, rh // p, rw // p
        x = x.reshape(gt, tp, c, gh // m, m, p, gw // m, m, p)
        x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
        return x.reshape(gt * gh * gw, c * tp * p * p), [gt, gh, gw]

    def preprocess(self, videos: Any, **kwargs: Any) -> BatchFeature:
        """Patchify a video (T,H,W,C uint8 array) or a list of them."""
        import torch

        if (isinstance(videos, np.ndarray) and videos.ndim == 4) or not isinstance(videos, (list, tuple)):
            videos = [videos]
        from transformers.video_utils import VideoMetadata

        metadata = kwargs.get("video_metadata")
        patches, grids, metas = [], [], []
        for i, v in enumerate(videos):
            arr = np.stack([np.asarray(f) for f in v]) if isinstance(v, (list, tuple)) else np.asarray(v)
            flat, grid = self._one_video(arr, kwargs.get("size"))
            patches.append(flat)
            grids.append(grid)
            meta = metadata[i] if isinstance(metadata, (list, tuple)) and i < len(metadata) else None
            if meta is None:  # frames arrive sampled: the sampled rate is the processor's fps
                n = int(arr.shape[0])
                meta = VideoMetadata(total_num_frames=n, fps=self.fps, frames_indices=list(range(n)))
            elif isinstance(meta, dict):
                meta = VideoMetadata(**meta)
            metas.append(meta)
        data: dict[str, Any] = {
            "pixel_values_videos": torch.from_numpy(np.concatenate(patches, axis=0)),
            "video_grid_thw": torch.tensor(grids, dtype=torch.long),
        }
        if kwargs.get("return_metadata"):  # asked by Qwen2.5-VL's processor; transformers 5.17's Omni
            data["video_metadata"] = metas  # processor would pass it on to generate() unasked
        return BatchFeature(data=data)

    def get_num_of_video_patches(
        self, num_frames: int, height: int, width: int, videos_kwargs: Any = None
    ) -> int:
        """Number of patches for a video of this size."""
        rh, rw = self._resized_hw(height, width)
        gt = math.ceil(num_frames / self.temporal_patch_size)
        return gt * (rh // self.patch_size) * (rw // self.patch_size)
