"""Fixtures for the accuracy tests: the real tiny-llm, loaded once, on one CPU thread."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_llm() -> Any:
    """tiny-llm loaded in float32 (built under the session's LMMBENCH_HOME)."""
    import torch

    from lmmbench.models import load_model

    torch.set_num_threads(1)  # the test box is shared: one thread is far faster under load
    return load_model("tiny-llm")
