"""Incremental Server-Sent Events splitter for the hot path.

``SSESplitter.feed`` takes raw body bytes as they arrive (events may be split across reads,
or several may arrive in one read) and appends the ``data`` payload of every complete event,
stamped with the arrival instant of the read that completed it. Comments (``: ping``),
``event:``/``id:``/``retry:`` fields and empty events are dropped; CRLF and LF line endings are
both accepted; several ``data:`` lines of one event are joined with ``\\n``. No JSON is decoded
here: that happens after the load (``lmmbench.backends.openai_stream.finalize_record``).
"""

from __future__ import annotations

__all__ = ["SSESplitter", "parse_event_block"]


def parse_event_block(block: bytes) -> bytes | None:
    """The ``data`` payload of one event block (lines without the blank terminator), or None."""
    if block.startswith(b"data:") and b"\n" not in block:
        return block[5:].strip()
    parts: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            if value.startswith(b" "):
                value = value[1:]
            parts.append(value)
        # comments (":..."), event:, id:, retry: and unknown fields are ignored
    if not parts:
        return None
    return b"\n".join(parts).strip()


class SSESplitter:
    """Splits a byte stream into SSE events; keeps the incomplete tail between reads."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes, t_ns: int, times: list[int], datas: list[bytes]) -> None:
        """Append ``(t_ns, payload)`` for every event completed by ``data``."""
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        start = 0
        find = buf.find
        while True:
            i = find(b"\n\n", start)
            if i < 0:
                break
            block = buf[start:i]
            start = i + 2
            if not block:
                continue
            if block.startswith(b"data:") and b"\n" not in block:
                times.append(t_ns)
                datas.append(block[5:].strip())
                continue
            payload = parse_event_block(block.strip(b"\n"))
            if payload is not None:
                times.append(t_ns)
                datas.append(payload)
        self._buf = buf[start:] if start else buf

    def flush(self, t_ns: int, times: list[int], datas: list[bytes]) -> None:
        """End of stream: an unterminated last event still counts."""
        tail = self._buf.strip(b"\r\n")
        self._buf = b""
        if tail:
            payload = parse_event_block(tail.replace(b"\r\n", b"\n"))
            if payload is not None:
                times.append(t_ns)
                datas.append(payload)
