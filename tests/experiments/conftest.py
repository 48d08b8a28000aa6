"""Fixtures of the research-spec tests: the tiny models, loaded once per session."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def omni() -> Any:
    from lmmbench.models import load_model

    return load_model("tiny-omni")


@pytest.fixture(scope="session")
def llm() -> Any:
    from lmmbench.models import load_model

    return load_model("tiny-llm")


@pytest.fixture(scope="session")
def vl() -> Any:
    from lmmbench.models import load_model

    return load_model("tiny-vl")
