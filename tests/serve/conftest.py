"""Fixtures for the engine and server tests: real tiny models, real servers on loopback ports."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import pytest

from lmmbench.engines import BatchEngine, TransformersEngine
from lmmbench.models import load_model
from lmmbench.serve import ServeConfig, ServerThread


@pytest.fixture(scope="session")
def tiny_llm() -> Any:
    return load_model("tiny-llm")


@pytest.fixture(scope="session")
def tiny_vl() -> Any:
    return load_model("tiny-vl")


@pytest.fixture
def llm_engine(tiny_llm: Any) -> BatchEngine:
    return BatchEngine(TransformersEngine(tiny_llm), max_batch_size=16)


def png_data_uri(width: int, height: int, color: tuple[int, int, int]) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def wav_base64(seconds: float, rate: int = 16000) -> str:
    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    t = np.arange(int(seconds * rate)) / rate
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 440 * t)).astype("float32"), rate, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def llm_server() -> Iterator[ServerThread]:
    cfg = ServeConfig(model="tiny-llm", port=free_port(), max_batch_size=8, max_queue=16, max_body_mb=0.5)
    with ServerThread(cfg) as srv:
        yield srv


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
