"""Stream clients and arrival processes are registries: a new process plugs in by name, and an
unknown name is one line naming the known ones."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from lmmbench.core.registry import RegistryError
from lmmbench.loadgen.arrivals import ARRIVALS, arrival_offsets_ns
from lmmbench.loadgen.protocol import STREAM_CLIENTS, make_client


@pytest.fixture
def pairs() -> Iterator[str]:
    """A test-only process: arrivals in pairs 2 ms apart, one pair every 1 / rate seconds."""

    def in_pairs(rng: random.Random, rate: float, burstiness: float, index: int, t_s: float) -> float:
        return t_s + 0.002 if index % 2 == 0 else (index + 1) // 2 / rate

    ARRIVALS.add("test-pairs", in_pairs)
    yield "test-pairs"
    ARRIVALS._items.pop("test-pairs")


def test_a_registered_arrival_process_drives_the_schedule(pairs: str) -> None:
    assert arrival_offsets_ns(pairs, 10, count=5) == [0, 2_000_000, 100_000_000, 102_000_000, 200_000_000]
    assert {"constant", "poisson", "gamma", pairs} <= set(ARRIVALS.names())


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: constant, gamma, poisson"):
        arrival_offsets_ns("weibull", 10, count=3)
    with pytest.raises(RegistryError, match="unknown stream_clients 'grpc'; known: openai-http"):
        make_client("grpc")
    assert "openai-http" in STREAM_CLIENTS
