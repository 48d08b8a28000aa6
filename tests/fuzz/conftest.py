"""Fixtures of the fuzz suite: the generated corpus and one test server for the whole suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_corpus import write_corpus

from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing.fixtures import running_testserver


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every malformed file of the corpus, written once."""
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def fuzz_url() -> Iterator[str]:
    """A test server with small injected latencies."""
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1)) as url:
        yield url
