"""The journal of a load point: finished requests on disk while the point is still running.

Full records need their raw SSE stream parsed, which the driver keeps off the event loop until
the load ends. So while a point runs, every ~0.5 s the driver appends the *raw* instants of the
requests that finished since the last flush (no JSON decoding, a few microseconds per request)
to ``records.partial.jsonl``: formatted in small slices that yield to the loop in between, and
written with one ``os.write`` per flush on an ``O_APPEND`` descriptor (several worker processes
append to the same file without interleaving). When the point ends its full records go to
``records.jsonl`` and the journal is removed; after a crash (SIGKILL, OOM, power) it holds what
was measured up to the last flush.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from lmmbench.core.request_records import RequestRecord

__all__ = ["JOURNAL_NAME", "Journal", "journal_line", "read_journal"]

JOURNAL_NAME = "records.partial.jsonl"
_SLICE = 128  # records formatted between two yields to the event loop (~0.2 ms)


def journal_line(rec: RequestRecord, labels_json: str) -> str:
    """One JSON line with the raw instants of a finished request (ns, ``perf_counter_ns``)."""
    base = rec.scheduled_ns
    events = ",".join([str(t - base) for t in rec.event_times_ns])
    return (
        f'{{"request_id":{rec.request_id},"worker":{rec.worker},"warmup":{"true" if rec.warmup else "false"},'
        f'"status":{rec.status},"error_kind":"{rec.error_kind}","scheduled_ns":{base},"slot_ns":{rec.slot_ns},'
        f'"sent_ns":{rec.sent_ns},"first_byte_ns":{rec.first_byte_ns},"end_ns":{rec.end_ns},'
        f'"e2e_ms":{(rec.end_ns - base) / 1e6 if rec.end_ns and base else "null"},'
        f'"event_offsets_ns":[{events}],"labels":{labels_json},"partial":true}}\n'
    )


class Journal:
    """Appends finished requests to the journal file from inside the event loop."""

    def __init__(self, path: Path | str, labels: dict[str, Any]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.labels_json = json.dumps(labels, default=str)
        self.pending: list[RequestRecord] = []
        self.written = 0

    def add(self, rec: RequestRecord) -> None:
        """Queue a finished request (called from the completion callback: one list append)."""
        self.pending.append(rec)

    async def flush(self) -> None:
        """Format what finished since the last flush, yielding between slices, then write once."""
        n = len(self.pending)
        parts: list[str] = []
        for i in range(0, n, _SLICE):
            if i:
                await asyncio.sleep(0)  # a cancel here leaves the batch queued for close()
            parts.extend(journal_line(r, self.labels_json) for r in self.pending[i : min(i + _SLICE, n)])
        self._write(parts)
        del self.pending[:n]

    def flush_now(self) -> None:
        """Write everything queued at once (after the load)."""
        batch, self.pending = self.pending, []
        self._write([journal_line(r, self.labels_json) for r in batch])

    def _write(self, parts: list[str]) -> None:
        if parts:
            data = "".join(parts).encode()
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            self.written += len(parts)

    async def run(self, period_s: float) -> None:
        """Flush every ``period_s`` until cancelled."""
        while True:
            await asyncio.sleep(period_s)
            await self.flush()

    def close(self) -> None:
        """Write what is left and close the file."""
        self.flush_now()
        os.close(self.fd)


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The journal's lines (a torn last line, from a crash mid-write, is skipped)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
