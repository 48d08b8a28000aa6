"""What ``lmmbench proxy`` refuses, and how: one ``ProxyError`` per failed request (its HTTP status, the field or
the part of the upstream's answer that was wrong), and the checks of a client's request body against the limits
table (``body_bytes``, ``json_depth``) and the types of the fields the proxy reads.

A client's malformed request is a 400 naming the field (a body past ``body_bytes`` a 413); an upstream answer the
proxy cannot use is a 502 naming what was wrong. Parsing of a large body runs off the event loop, so that one
request never holds up the others.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from lmmbench.config.limits import limit_value

__all__ = ["OFF_LOOP_BYTES", "ProxyError", "check_depth", "loads_bounded", "parse_client_body", "read_body"]

OFF_LOOP_BYTES = 256 * 1024  # JSON at least this long is parsed / written in a worker thread, not on the loop


class ProxyError(Exception):
    """One failed request: the status the client gets and the one-line message (logged and returned)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def kind(self) -> str:
        """The OpenAI-style error ``type``."""
        return "upstream_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error object."""
        return {"error": {"message": self.message, "type": self.kind, "code": self.status}}


def check_depth(obj: Any, limit: int, what: str, status: int) -> None:
    """``ProxyError(status)`` when ``obj`` nests [ ] / { } deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise ProxyError(status, f"{what}: nested deeper than {limit} levels (limit json_depth; raise it with "
                                     "LMMBENCH_LIMIT_JSON_DEPTH=N)")  # fmt: skip
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def _loads(raw: bytes, what: str, status: int, depth: int) -> Any:
    try:
        obj = json.loads(raw)
    except RecursionError:
        raise ProxyError(status, f"{what}: nested too deep to read (limit json_depth={depth})") from None
    except ValueError as exc:
        raise ProxyError(status, f"{what}: not JSON ({exc})") from None
    check_depth(obj, depth, what, status)
    return obj


async def loads_bounded(raw: bytes, what: str, status: int) -> Any:
    """``raw`` parsed (off the event loop when large), its nesting within ``json_depth``; else ``ProxyError``."""
    depth = limit_value("json_depth")
    if len(raw) < OFF_LOOP_BYTES:
        return _loads(raw, what, status, depth)
    return await asyncio.to_thread(_loads, raw, what, status, depth)


async def read_body(request: Any) -> bytes:
    """The client's request body, at most ``body_bytes`` read (413 past it, before the rest is read)."""
    bound = limit_value("body_bytes")
    too_big = ProxyError(413, f"request body: over {bound} bytes (limit body_bytes; raise it with "
                              "LMMBENCH_LIMIT_BODY_BYTES=N)")  # fmt: skip
    length = request.headers.get("content-length")
    if length is not None and length.strip().isdigit() and int(length) > bound:
        raise too_big
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > bound:
            raise too_big
        parts.append(part)
    return b"".join(parts)


_BOOL_FIELDS = ("stream", "echo")
_INT_FIELDS = ("max_tokens", "max_completion_tokens")


async def parse_client_body(raw: bytes) -> dict[str, Any]:
    """A completion request's JSON object, the fields the proxy reads checked; 400 naming the field otherwise."""
    body = await loads_bounded(raw, "request body", 400)
    if not isinstance(body, dict):
        raise ProxyError(400, f"request body: expected a JSON object, got {type(body).__name__}")
    for key in _BOOL_FIELDS:
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise ProxyError(400, f"{key}: expected true or false, got {body[key]!r:.80}")
    for key in _INT_FIELDS:
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ProxyError(400, f"{key}: expected a whole number, got {value!r:.80}")
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise ProxyError(400, f"stream_options: expected an object such as {{\"include_usage\": true}}, got "
                                  f"{opts!r:.80}")  # fmt: skip
        usage = opts.get("include_usage")
        if usage is not None and not isinstance(usage, bool):
            raise ProxyError(400, f"stream_options.include_usage: expected true or false, got {usage!r:.80}")
    return body
