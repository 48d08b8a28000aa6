"""Helpers shared by the serve tests (a module name no other test directory uses)."""

from __future__ import annotations

import base64
import io

from lmmbench.core.net import free_loopback_port

free_port = free_loopback_port


def png_data_uri(width: int, height: int, color: tuple[int, int, int]) -> str:
    """A solid-colour PNG as a data: URI."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def wav_base64(seconds: float, rate: int = 16000) -> str:
    """A 440 Hz tone as base64 WAV."""
    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 440 * t)).astype("float32"), rate, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()
