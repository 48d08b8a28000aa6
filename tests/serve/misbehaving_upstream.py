"""An OpenAI-compatible upstream that misbehaves the way real ones do, on a real 127.0.0.1 socket (raw HTTP/1.1 over
asyncio streams, so that framing itself can be broken). A request's case is named in its body (``case:NAME``
anywhere, e.g. in the prompt); every bad case first sends its 200 head and one valid chunk, waits ``delay_s`` (the
window in which other clients must be answered), notes the instant, then misbehaves:

- ``huge-line``: one ``data:`` line of ``huge_bytes`` (300 MB by default), written until the reader hangs up;
- ``tool-index``: a tool call at list index 2,000,000,000;
- ``index-str`` / ``function-str``: a choice index given as a string / a tool call's ``function`` as a string;
- ``cut``: the connection closed in the middle of the chunked body;
- ``bad-chunk``: an invalid chunk size, then silence;
- ``non-json``: events that are not JSON;
- ``stall``: silence, the connection kept open;
- ``sse-json``: a whole JSON answer under an event-stream label (sent at once, not bad: it has text).

Anything else (``case:normal`` or no case) is a normal three-token stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from typing import Any

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
MB = 1024 * 1024


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(obj: Any) -> bytes:
    return chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")


def delta(text: str | None = None, index: Any = 0, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"content": text} if text is not None else {}
    d.update(extra)
    return {"id": "x", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": index, "delta": d, "finish_reason": finish}]}  # fmt: skip


USAGE = {"id": "x", "object": "chat.completion.chunk", "choices": [],
         "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}  # fmt: skip
END = event(b"[DONE]") + b"0\r\n\r\n"


class MisbehavingUpstream:
    """Runs in a thread with its own event loop; ``url`` once started; ``marks`` the instants of each bad part."""

    def __init__(self, delay_s: float = 2.0, huge_bytes: int = 300 * MB) -> None:
        self.delay_s, self.huge_bytes = delay_s, huge_bytes
        self.marks: list[tuple[str, float]] = []  # (case, time.monotonic() when its bad part began)
        self.huge_sent = 0
        self.authorization: list[str] = []  # the Authorization header of every request, as received
        self.posts = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def __enter__(self) -> MisbehavingUpstream:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop).result(10)  # fmt: skip
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path = head.split(b" ", 2)[:2]
                length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                body = await reader.readexactly(int(length.group(1))) if length else b""
                auth = re.search(rb"(?i)\r\nauthorization:\s*([^\r]*)", head)
                self.authorization.append(auth.group(1).decode() if auth else "")
                if method == b"GET":
                    await self._get(path.decode(), writer)
                    continue
                self.posts += 1
                case = re.search(rb"case:([a-z-]+)", body)
                if not await self._post(case.group(1).decode() if case else "normal", reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _get(self, path: str, writer: asyncio.StreamWriter) -> None:
        if path.rstrip("/").endswith("/models"):
            data = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        else:
            data = b"{}"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data)
                     + data)  # fmt: skip
        await writer.drain()

    async def _post(self, case: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done."""
        if case == "sse-json":
            whole = {"id": "x", "object": "chat.completion", "model": "m", "usage": USAGE["usage"],
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole answer"},
                                  "finish_reason": "stop"}]}  # fmt: skip
            writer.write(HEAD + chunk(json.dumps(whole).encode()) + b"0\r\n\r\n")
            await writer.drain()
            return True
        writer.write(HEAD + event(delta("one")))
        await writer.drain()
        if case == "normal":
            writer.write(event(delta(" two")) + event(delta(" three", finish="stop")) + event(USAGE) + END)
            await writer.drain()
            return True
        await asyncio.sleep(self.delay_s)
        self.marks.append((case, time.monotonic()))
        return await getattr(self, "_" + case.replace("-", "_"))(reader, writer)

    async def _huge_line(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(chunk(b'data: {"choices": [{"index": 0, "delta": {"content": "'))
        piece = chunk(b"x" * MB)
        while self.huge_sent < self.huge_bytes:
            writer.write(piece)
            await writer.drain()  # raises once the reader hung up
            self.huge_sent += MB
        writer.write(chunk(b'"}}]}\n\n') + END)
        await writer.drain()
        return False

    async def _finish(self, writer: asyncio.StreamWriter, *events: bytes) -> bool:
        writer.write(b"".join(events) + event(delta(finish="stop")) + event(USAGE) + END)
        await writer.drain()
        return True

    async def _tool_index(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        call = {"index": 2_000_000_000, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return await self._finish(writer, event(delta(tool_calls=[call])))

    async def _index_str(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        return await self._finish(writer, event(delta(" two", index="zero")))

    async def _function_str(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        return await self._finish(writer, event(delta(tool_calls=[{"index": 0, "function": "f()"}])))

    async def _non_json(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        return await self._finish(writer, event(b"hello"), event(b"{broken"))

    async def _cut(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"40\r\ndata: {\"choi")  # half of a chunk, then the connection goes
        await writer.drain()
        return False

    async def _bad_chunk(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"zz\r\ndata: x\n\n\r\n")
        await writer.drain()
        await reader.read()  # silence until the reader hangs up
        return False

    async def _stall(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await reader.read()
        return False
