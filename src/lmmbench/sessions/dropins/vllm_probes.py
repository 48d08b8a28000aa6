"""vLLM's ``--probe-request-rate``: while the load runs, one-token text requests ("Hi") on their own connection,
one at a time with a pause of 1 / rate after each, outside ``--max-concurrency``; their end-to-end latency shows
what the load does to unrelated traffic (vLLM 0.33.0's ``probe_loop``; keys ``probe_*``, its table section).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Any

__all__ = ["ProbeLoop", "probe_stats"]


class ProbeLoop:
    """A background thread sending probes to ``url`` + ``path`` until ``stop()``."""

    def __init__(self, url: str, path: str, body: dict[str, Any], headers: dict[str, str], rate: float) -> None:
        self.parts = urllib.parse.urlsplit(url.rstrip("/").removesuffix("/v1"))
        self.path, self.body, self.headers, self.interval_s = path, body, headers, 1.0 / rate
        self.latencies_s: list[float] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-probes", daemon=True)

    def start(self) -> ProbeLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _connection(self) -> http.client.HTTPConnection:
        host, port = self.parts.hostname or "127.0.0.1", self.parts.port
        if self.parts.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=60)
        return http.client.HTTPConnection(host, port, timeout=60)

    def _one(self, conn: http.client.HTTPConnection) -> None:
        data = json.dumps(self.body).encode()
        start = time.perf_counter()
        conn.request("POST", self.path, body=data, headers={"Content-Type": "application/json", **self.headers})
        resp = conn.getresponse()
        payload = resp.read()  # the stream to its end: the last token's arrival
        if resp.status == 200 and b"data:" in payload:
            self.latencies_s.append(time.perf_counter() - start)
        else:
            self.failed += 1

    def _run(self) -> None:
        conn = self._connection()
        try:
            while not self._stop.is_set():
                try:
                    self._one(conn)
                except (OSError, http.client.HTTPException):
                    self.failed += 1
                    conn.close()
                    conn = self._connection()
                self._stop.wait(self.interval_s)
        finally:
            conn.close()


def probe_stats(loop: ProbeLoop) -> dict[str, Any] | None:
    """vLLM's ``probe_*`` keys (milliseconds), or None when no probe succeeded (as vLLM)."""
    from lmmbench.metrics.stats import percentile

    lats = sorted(x * 1e3 for x in loop.latencies_s)
    if not lats:
        return None
    return {"probe_completed": len(lats), "probe_failed": loop.failed, "probe_median_e2el_ms": percentile(lats, 50),
            "probe_p99_e2el_ms": percentile(lats, 99), "probe_max_e2el_ms": lats[-1]}  # fmt: skip
