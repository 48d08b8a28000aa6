"""The journal of a load point: finished requests on disk while the point is still running.

Full records need their raw SSE stream parsed, which the driver keeps off the event loop until
the load ends. So while a point runs, every ~0.5 s the driver appends the *raw* instants of the
requests that finished since the last flush (no JSON decoding, a few microseconds per request;
the per-event instants stay in memory for the full records) to ``records.partial.jsonl``:
formatted in slices of at most ~0.2 ms that yield to the loop in between, and
written with one ``os.write`` per flush on an ``O_APPEND`` descriptor (several worker processes
append to the same file without interleaving). When the point ends its full records go to
``records.jsonl`` and the journal is removed; after a crash (SIGKILL, OOM, power) it holds what
was measured up to the last flush.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from lmmbench.core.request_records import RequestRecord

__all__ = ["JOURNAL_NAME", "Journal", "journal_line", "read_journal"]

JOURNAL_NAME = "records.partial.jsonl"
_SLICE_NS = 200_000  # formatting time between two yields to the event loop


_TEXT_EVENT = re.compile(rb'"(?:content|text|reasoning_content|reasoning)"\s*:\s*"(?!")')


def _first_token_ns(rec: RequestRecord) -> int:
    """Instant of the first SSE event carrying generated text (a regex on the raw bytes, no JSON)."""
    for t, data in zip(rec.event_times_ns, rec.event_data, strict=False):
        if _TEXT_EVENT.search(data):
            return t
    return 0


def _token_counts(rec: RequestRecord) -> tuple[int | None, int | None, str]:
    """(prompt_tokens, output_tokens, source) from the last event with usage (one JSON parse), else the
    count of text-carrying events ("chunks": tokens per chunk unknown, as the full record would say)."""
    for data in reversed(rec.event_data[-3:]):
        if b'"usage"' in data:
            try:
                usage = json.loads(data).get("usage") or {}
            except (ValueError, AttributeError):
                break
            out, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            if isinstance(out, int):
                return (prompt if isinstance(prompt, int) else None), out, "usage"
            break
    return None, sum(1 for d in rec.event_data if _TEXT_EVENT.search(d)), "chunks"


def journal_line(rec: RequestRecord, labels_json: str) -> str:
    """One JSON line with the raw instants of a finished request (ns, ``perf_counter_ns``).

    ``first_event_ns`` / ``last_event_ns`` are the first and last SSE events (the first is often a
    role-only chunk); ``first_token_ns`` is the first event with generated text and
    ``prompt_tokens`` / ``output_tokens`` come from the server's usage (``token_source``), so
    ``lmmbench perf recover`` can compute TTFT, TPOT and throughput from the journal alone.
    """
    base = rec.scheduled_ns
    ev = rec.event_times_ns
    kind = json.dumps(rec.error_kind) if rec.error_kind else '""'
    prompt, out, source = _token_counts(rec)
    return (
        f'{{"request_id":{rec.request_id},"worker":{rec.worker},"warmup":{"true" if rec.warmup else "false"},'
        f'"status":{rec.status},"error_kind":{kind},"scheduled_ns":{base},"slot_ns":{rec.slot_ns},'
        f'"sent_ns":{rec.sent_ns},"first_byte_ns":{rec.first_byte_ns},"end_ns":{rec.end_ns},'
        f'"e2e_ms":{(rec.end_ns - base) / 1e6 if rec.end_ns and base else "null"},'
        f'"events":{len(ev)},"first_event_ns":{ev[0] if ev else 0},"last_event_ns":{ev[-1] if ev else 0},'
        f'"first_token_ns":{_first_token_ns(rec)},"prompt_tokens":{"null" if prompt is None else prompt},'
        f'"output_tokens":{"null" if out is None else out},"token_source":"{source}",'
        f'"input_tokens":{"null" if rec.input_tokens is None else rec.input_tokens},'
        f'"labels":{labels_json},"partial":true}}\n'
    )


class Journal:
    """Appends finished requests to the journal file from inside the event loop."""

    def __init__(self, path: Path | str, labels: dict[str, Any]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.labels_json = json.dumps(labels, default=str)
        self.pending: list[RequestRecord] = []

    def add(self, rec: RequestRecord) -> None:
        """Queue a finished request (called from the completion callback: one list append)."""
        self.pending.append(rec)

    async def flush(self) -> None:
        """Format what finished since the last flush, yielding between slices, then write once."""
        n = len(self.pending)
        parts: list[str] = []
        pending, labels = self.pending, self.labels_json
        i = 0
        while i < n:
            stop = time.perf_counter_ns() + _SLICE_NS
            while i < n:
                parts.append(journal_line(pending[i], labels))
                i += 1
                if not i & 7 and time.perf_counter_ns() > stop:
                    break
            if i < n:
                await asyncio.sleep(0)  # let sends and reads run; a cancel here leaves the batch queued
        self._write(parts)
        del pending[:n]

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
