"""The one Server-Sent Events reader of lmmbench: the load generator's client and ``lmmbench proxy`` both read
streams through it.

``SSESplitter.feed`` takes raw body bytes as they arrive (events may be split across reads, or several may arrive
in one read) and appends the ``data`` payload of every complete event, stamped with the arrival instant of the read
that completed it. Comments (``: ping``), ``event:``/``id:``/``retry:`` fields and empty events are dropped; CRLF
and LF line endings are both accepted; several ``data:`` lines of one event are joined with ``\\n``. No JSON is
decoded here: that happens after the load (``lmmbench.backends.openai_stream.finalize_record``).

Its work is linear in the bytes read: each read is scanned once (from one byte before it, for a terminator split
across reads) and the unfinished event is kept in a growing buffer, never copied or re-scanned whole per read.
Two bounds from the limits table (``config.limits``) end a request, never the process, with a ``StreamError``
naming its cause: ``sse_line_bytes``, the size of one unfinished line / event held between reads (an upstream
sending a 300 MB line is cut at the bound), and ``sse_idle_s``, the seconds a stream may go without a byte
(``stalled``; ``read_events`` applies it to an asynchronous byte source).

A stream whose first byte is ``{`` or ``[`` is a whole JSON answer sent under an event-stream label: its bytes are
kept (within ``sse_line_bytes``) and given as one event at ``flush``, as a non-streamed answer is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from lmmbench.config.limits import limit_value

__all__ = ["SSESplitter", "StreamError", "parse_event_block", "read_events"]

_WS = b" \t\r\n"


class StreamError(Exception):
    """A stream ended for a cause (``kind``: ``sse_line_too_long``, ``stream_idle``), with a one-line message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


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


def _emit(block: bytes, t_ns: int, times: list[int], datas: list[bytes]) -> None:
    if block.startswith(b"data:") and b"\n" not in block:
        times.append(t_ns)
        datas.append(block[5:].strip())
        return
    payload = parse_event_block(block.strip(b"\n"))
    if payload is not None:
        times.append(t_ns)
        datas.append(payload)


class SSESplitter:
    """Splits a byte stream into SSE events; keeps the unfinished tail (bounded) between reads."""

    __slots__ = ("_buf", "_mode", "idle_ns", "last_read_ns", "max_line_bytes")

    def __init__(self, max_line_bytes: int | None = None, idle_s: float | None = None) -> None:
        self._buf = bytearray()
        self._mode = 0  # 0: before the first byte, 1: events, 2: a whole JSON body
        self.max_line_bytes = max_line_bytes if max_line_bytes is not None else limit_value("sse_line_bytes")
        idle = idle_s if idle_s is not None else limit_value("sse_idle_s")
        self.idle_ns = int(idle * 1e9)
        self.last_read_ns = time.perf_counter_ns()

    @property
    def whole_json(self) -> bool:
        """Whether the stream turned out to be one JSON body rather than events."""
        return self._mode == 2

    def stalled(self, now_ns: int) -> bool:
        """Whether no byte came for longer than the idle bound (``sse_idle_s``)."""
        return now_ns - self.last_read_ns > self.idle_ns

    def idle_error(self) -> StreamError:
        """The error that ends a stalled stream."""
        return StreamError("stream_idle", f"the stream sent no byte for {self.idle_ns / 1e9:g} s (limit sse_idle_s; "
                                          "raise it with LMMBENCH_LIMIT_SSE_IDLE_S=N)")  # fmt: skip

    def _too_long(self) -> StreamError:
        return StreamError("sse_line_too_long", f"one line of the stream exceeds {self.max_line_bytes} bytes (limit "
                                                "sse_line_bytes; raise it with LMMBENCH_LIMIT_SSE_LINE_BYTES=N)")

    def feed(self, data: bytes, t_ns: int, times: list[int], datas: list[bytes]) -> None:
        """Append ``(t_ns, payload)`` for every event completed by ``data``; ``StreamError`` past the line bound."""
        self.last_read_ns = t_ns
        if not data:
            return
        buf = self._buf
        if self._mode != 1:
            if self._mode == 0:
                head = data.lstrip(_WS)
                if not head:
                    return
                self._mode = 2 if head[:1] in (b"{", b"[") else 1
            if self._mode == 2:
                buf += data
                if len(buf) > self.max_line_bytes:
                    raise self._too_long()
                return
        if buf and buf[-1] == 13 and data[:1] == b"\n":  # a CRLF split across two reads
            del buf[-1]
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        if buf:
            scan = len(buf) - 1  # a "\n\n" may straddle the two reads
            buf += data
            src: bytes | bytearray = buf
        else:
            scan = 0
            src = data
        start = 0
        find = src.find
        while True:
            i = find(b"\n\n", max(scan, start))
            if i < 0:
                break
            block = bytes(src[start:i])
            start = i + 2
            if block:
                _emit(block, t_ns, times, datas)
        if src is buf:
            if start:
                del buf[:start]
        elif start < len(data):
            buf += data[start:]
        if len(buf) > self.max_line_bytes:
            buf.clear()
            raise self._too_long()

    def flush(self, t_ns: int, times: list[int], datas: list[bytes]) -> None:
        """End of stream: an unterminated last event (or a whole JSON body) still counts."""
        raw = bytes(self._buf)
        self._buf = bytearray()
        mode, self._mode = self._mode, 0  # the next response on a kept-alive connection starts afresh
        if mode == 2:
            times.append(t_ns)
            datas.append(raw.strip())
            return
        tail = raw.strip(b"\r\n")
        if tail:
            payload = parse_event_block(tail.replace(b"\r\n", b"\n"))
            if payload is not None:
                times.append(t_ns)
                datas.append(payload)


async def read_events(read: Callable[[], Awaitable[bytes]], splitter: SSESplitter,
                      ) -> AsyncIterator[list[tuple[int, bytes]]]:  # fmt: skip
    """The events of an asynchronous byte source (``read`` returns b"" at its end), a list per read.

    ``StreamError`` when a read waits longer than the idle bound or a line exceeds its bound."""
    times: list[int] = []
    datas: list[bytes] = []
    idle_s = splitter.idle_ns / 1e9
    while True:
        try:
            data = await asyncio.wait_for(read(), idle_s)
        except asyncio.TimeoutError:
            raise splitter.idle_error() from None
        now = time.perf_counter_ns()
        if not data:
            splitter.flush(now, times, datas)
            if times:
                yield list(zip(times, datas, strict=True))
            return
        splitter.feed(data, now, times, datas)
        if times:
            yield list(zip(times, datas, strict=True))
            times.clear()
            datas.clear()
