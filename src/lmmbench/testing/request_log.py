"""What the test server received, for tests that assert a flag's effect on the wire: each POST's path and query,
its headers and its JSON body (without the prompt, to stay small), in arrival order; ``GET /received`` returns
them. Admin POSTs (``/flush_cache``, ``/start_profile`` ...) are logged the same way, so a test sees their order
relative to the load."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["RequestLog"]

#: body fields left out of the log: the prompt in its several shapes (large, and not what flags change)
_PROMPT_KEYS = ("prompt", "messages", "text", "input_ids")


class RequestLog:
    """The POSTs one server process received, kept raw (parsed only when asked for, so logging costs the server
    next to nothing): at most ``cap`` of them and ``max_bytes`` of bodies; later ones are counted, not kept."""

    def __init__(self, cap: int = 20000, max_bytes: int = 32 << 20) -> None:
        self.cap, self.max_bytes = cap, max_bytes
        self.raw: list[tuple[str, list[str], bytes]] = []
        self.bytes = 0
        self.dropped = 0

    def add(self, target: str, head_lines: list[str], body: bytes) -> None:
        """Log one POST: ``target`` is the request target (path and query), ``head_lines`` its header lines."""
        if len(self.raw) >= self.cap or self.bytes + len(body) > self.max_bytes:
            self.dropped += 1
            return
        self.bytes += len(body)
        self.raw.append((target, head_lines, body))

    def page(self) -> dict[str, Any]:
        """The ``GET /received`` answer: each POST's path, query, headers (lower-case names) and JSON body."""
        return {"received": [_entry(*raw) for raw in self.raw], "dropped": self.dropped}


def _entry(target: str, head_lines: list[str], body: bytes) -> dict[str, Any]:
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for line in head_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    try:
        parsed: Any = json.loads(body) if body else None
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        parsed = {k: v for k, v in parsed.items() if k not in _PROMPT_KEYS}
    return {"path": path, "query": query, "headers": headers, "body": parsed}
