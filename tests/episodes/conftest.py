"""Episode tests run torch on one thread: the toy networks are many tiny ops, and two threads on a
shared 2-core machine spin against each other (measured: 20x slower)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
