"""openpi's image preprocessing for policies: resize with padding (``resize_with_pad`` of openpi-client's
``image_tools``, itself TensorFlow's ``tf.image.resize_with_pad``), written here after reading it."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["resize_with_pad"]


def resize_with_pad(image: Any, height: int, width: int) -> np.ndarray:
    """``image`` ``(H, W, C)`` uint8 scaled by one factor to fit ``height`` x ``width`` (bilinear, each side
    truncated to an integer) and pasted centred on zeros (the offsets truncated); returned unchanged when it has
    that size already, as openpi's."""
    arr = np.asarray(image)
    cur_h, cur_w = arr.shape[:2]
    if (cur_h, cur_w) == (height, width):
        return arr
    from PIL import Image

    ratio = max(cur_w / width, cur_h / height)
    new_h, new_w = int(cur_h / ratio), int(cur_w / ratio)
    resized = np.asarray(Image.fromarray(arr).resize((new_w, new_h), resample=Image.BILINEAR))
    out = np.zeros((height, width, *arr.shape[2:]), dtype=arr.dtype)
    top, left = max(0, int((height - new_h) / 2)), max(0, int((width - new_w) / 2))
    out[top:top + new_h, left:left + new_w] = resized
    return out
