"""Fixtures for the engine and server tests: real tiny models, real servers on loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serve_helpers import free_port

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


@pytest.fixture(scope="module")
def llm_server() -> Iterator[ServerThread]:
    cfg = ServeConfig(model="tiny-llm", port=free_port(), max_batch_size=8, max_queue=16, max_body_mb=0.5)
    with ServerThread(cfg) as srv:
        yield srv
