"""Shared test fixtures: an isolated LMMBENCH_HOME and free loopback ports."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.core.net import free_loopback_port


@pytest.fixture(scope="session", autouse=True)
def lmmbench_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test session builds its tiny models under a fresh LMMBENCH_HOME."""
    home = tmp_path_factory.mktemp("lmmbench_home")
    old = os.environ.get("LMMBENCH_HOME")
    os.environ["LMMBENCH_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("LMMBENCH_HOME", None)
    else:
        os.environ["LMMBENCH_HOME"] = old


free_port = free_loopback_port


@pytest.fixture
def port() -> int:
    """A free loopback port chosen at run time."""
    return free_port()
