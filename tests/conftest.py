"""Shared test fixtures: an isolated LMMBENCH_HOME and free loopback ports."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> int:
    """A free loopback port chosen at run time."""
    return free_port()
