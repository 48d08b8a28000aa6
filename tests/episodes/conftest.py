"""Episode tests run torch on one thread: the toy networks are many tiny ops, and two threads on a
shared 2-core machine spin against each other (measured: 20x slower). ``libero``: LIBERO's module for the tests
that build its scenes, its kept scenes closed after each test module."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def libero() -> Iterator[Any]:
    if os.environ.get("CI"):  # CI installs lmmbench[libero]: a missing LIBERO fails here instead of skipping
        importlib.import_module("libero.libero.envs")
    else:
        pytest.importorskip("libero.libero.envs", reason="LIBERO needs pip install 'lmmbench[libero]'")
    from lmmbench.episodes.envs import libero as module

    yield module
    module.close_idle_scenes()
