"""Overload: ten times the queue bound of concurrent requests gets only 200s and 429s."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from serve_helpers import free_port

from lmmbench.engines.transformers_engine import process_memory_bytes
from lmmbench.serve import ServeConfig, ServerThread

QUEUE_BOUND = 4


async def _burst(url: str, n: int) -> tuple[list[httpx.Response], list[float]]:
    health_latencies: list[float] = []
    limits = httpx.Limits(max_connections=n + 4)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        body = {"model": "tiny-llm", "prompt": "overload me", "max_tokens": 24, "ignore_eos": True}
        sends = [asyncio.create_task(client.post(url + "/v1/completions", json=body)) for _ in range(n)]
        while not all(t.done() for t in sends):
            t0 = time.perf_counter()
            health = await client.get(url + "/health", timeout=5)
            assert health.status_code == 200 and health.json()["status"] == "ok"
            health_latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
        return [t.result() for t in sends], health_latencies


def test_ten_times_the_queue_bound_gets_only_200_and_429() -> None:
    cfg = ServeConfig(model="tiny-llm", port=free_port(), max_batch_size=2, max_queue=QUEUE_BOUND)
    with ServerThread(cfg) as srv:
        rss_before = process_memory_bytes()
        responses, health_latencies = asyncio.run(_burst(srv.url, 10 * QUEUE_BOUND))
        statuses = [r.status_code for r in responses]
        assert set(statuses) <= {200, 429}, statuses
        assert statuses.count(200) >= QUEUE_BOUND and statuses.count(429) >= 1
        for r in responses:
            if r.status_code == 429:
                assert r.headers["retry-after"].isdigit()
                assert r.json()["error"]["type"] == "rate_limit_error"
            else:
                assert r.json()["usage"]["completion_tokens"] == 24
        assert len(health_latencies) >= 1 and max(health_latencies) < 5
        assert process_memory_bytes() - rss_before < 200 * 2**20
        assert srv.engine.scheduler.num_waiting() == 0
        metrics = httpx.get(srv.url + "/metrics", timeout=5).text
        rejected = [
            ln for ln in metrics.splitlines() if ln.startswith('lmmbench_requests_rejected_total{reason="queue_full"}')
        ]
        assert int(rejected[0].split()[1]) == statuses.count(429)
        # and the server still serves afterwards
        ok = httpx.post(
            srv.url + "/v1/completions", json={"model": "tiny-llm", "prompt": "x", "max_tokens": 2}, timeout=30
        )
        assert ok.status_code == 200


def test_a_client_that_leaves_mid_body_logs_no_unexpected_error(
    llm_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """It sends fewer bytes than its Content-Length and disconnects: the server logged "unexpected error" with two
    tracebacks (it stayed up). Now it is an ordinary bad request, and the next request is served."""
    import logging
    import socket
    import time
    import urllib.request
    from urllib.parse import urlsplit

    parts = urlsplit(llm_server.url)
    with caplog.at_level(logging.WARNING), socket.create_connection((parts.hostname, parts.port), timeout=5) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"model\": \"tiny")  # fmt: skip
    time.sleep(0.5)
    assert not [r for r in caplog.records if "unexpected" in r.getMessage()]
    with urllib.request.urlopen(f"{llm_server.url}/v1/models", timeout=10) as resp:
        assert resp.status == 200
