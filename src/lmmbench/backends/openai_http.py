"""A lean streaming HTTP/1.1 client for OpenAI-compatible servers, built on asyncio protocols.

Why not a general HTTP library: at hundreds of requests per second on two cores, the client's
own cost becomes part of every latency it reports. This client keeps persistent connections
(opened before the load, so connection set-up never falls inside TTFT), writes request bytes
encoded before the load, and on every read only stamps ``perf_counter_ns``, undoes chunked
transfer encoding and splits SSE events. One request is one callback chain: no task, no
coroutine, no JSON on the hot path.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from lmmbench.backends.openai_stream import finalize_record
from lmmbench.backends.sglang_native import native_body
from lmmbench.backends.sse import SSESplitter, StreamError
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest, RequestRecord

__all__ = ["EndpointInfo", "OpenAIHttpClient", "parse_base_url"]

_now = time.perf_counter_ns
_MAX_ERROR_BODY = 65536
_MAX_HEAD = 1 << 20  # an HTTP response head (status line and headers)
_MAX_CHUNK_LINE = 4096  # one chunk-size line with its extensions

_IDLE, _HEAD, _BODY = 0, 1, 2
_LEN, _CHUNKED, _CLOSE = 0, 1, 2

DoneCallback = Callable[[RequestRecord], None]


class EndpointInfo:
    """Host, port, TLS and path prefix of a base URL such as ``http://host:8000`` or ``.../v1``; ``authorization``:
    the ``Basic`` credentials of its user info (``http://user:password@host``), never part of the host name."""

    def __init__(self, host: str, port: int, tls: bool, prefix: str, authorization: str | None = None) -> None:
        self.host, self.port, self.tls, self.prefix = host, port, tls, prefix
        self.authorization = authorization

    def path(self, endpoint: str) -> str:
        """The request path of ``chat``, ``completions``, ``models`` or ``generate`` (SGLang's native API)."""
        if endpoint == "generate":
            return f"{self.prefix}/generate"
        tail = {"chat": "/chat/completions", "completions": "/completions", "models": "/models"}[endpoint]
        return f"{self.prefix}/v1{tail}"


def parse_base_url(url: str) -> EndpointInfo:
    """Parse the server's base URL; a malformed one is a ``UserError`` (its user info masked in the message)."""
    from lmmbench.core.secrets import redact_text, url_credentials

    shown = redact_text(url)
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        raise UserError(f"--url {shown!r}: expected http://host:port (optionally ending in /v1)") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise UserError(f"--url {shown!r}: expected http://host:port (optionally ending in /v1)")
    tls = parts.scheme == "https"
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError:
        raise UserError(f"--url {shown!r}: bad port") from None
    prefix = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if prefix.endswith(suffix):
            prefix = prefix[: -len(suffix)]
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    return EndpointInfo(hostname, port, tls, prefix, url_credentials(url)[1])


class _Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, client: OpenAIHttpClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.rec: RequestRecord | None = None
        self.on_done: DoneCallback | None = None
        self.state = _IDLE
        self.head = bytearray()
        self.cbuf = bytearray()
        self.framing = _LEN
        self.remaining = 0
        self.chunk_left = 0  # >0 bytes of chunk data left, 0 size line expected, -2 CRLF, -3 trailer
        self.is_sse = False
        self.keep_alive = True
        self.splitter = SSESplitter()

    # asyncio callbacks -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.rec is not None:
            if self.state == _BODY and self.framing == _CLOSE:
                self._finish(_now())
            else:
                self._fail("disconnect", f"connection closed by peer: {exc or 'EOF'}")
        self.client._discard(self)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost reports

    def data_received(self, data: bytes) -> None:
        t = _now()
        rec = self.rec
        if rec is None:
            return
        self.splitter.last_read_ns = t
        if not rec.first_byte_ns:
            rec.first_byte_ns = t
        if self.state == _HEAD:
            self.head += data
            i = self.head.find(b"\r\n\r\n")
            if i < 0:
                if len(self.head) > _MAX_HEAD:
                    self.expire("malformed_sse", f"a response head of over {_MAX_HEAD} bytes")
                return
            data = bytes(self.head[i + 4 :])
            if not self._parse_head(bytes(self.head[:i])):
                return
            self.head.clear()
            self.state = _BODY
            if self.framing == _LEN and self.remaining == 0:
                self._finish(t)
                return
            if not data:
                return
        if self.framing == _CHUNKED:
            self._feed_chunked(data, t)
        elif self.framing == _LEN:
            take = data[: self.remaining]
            self.remaining -= len(take)
            self._body(take, t)
            if self.remaining <= 0:
                self._finish(t)
        else:
            self._body(data, t)

    # request life cycle ------------------------------------------------------------------
    def send(self, rec: RequestRecord, data: bytes, on_done: DoneCallback) -> None:
        self.rec = rec
        self.on_done = on_done
        self.state = _HEAD
        self.head.clear()
        self.framing = _LEN
        self.chunk_left = 0
        self.keep_alive = True
        rec.sent_ns = self.splitter.last_read_ns = _now()
        assert self.transport is not None
        self.transport.write(data)

    def _parse_head(self, head: bytes) -> bool:
        rec = self.rec
        assert rec is not None
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            self._fail("malformed_sse", f"bad HTTP status line: {lines[0][:80]!r}")
            self.abort()
            return False
        rec.status = status
        self.framing = _CLOSE
        self.is_sse = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                self.framing = _LEN
                self.remaining = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                self.framing = _CHUNKED
            elif name == b"content-type":
                self.is_sse = b"event-stream" in value.lower()
            elif name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
        if self.framing == _CHUNKED:
            self.chunk_left = 0
            self.cbuf.clear()
        if status != 200:
            self.is_sse = False
        return True

    def _feed_chunked(self, data: bytes, t: int) -> None:
        buf = self.cbuf
        buf += data
        pos = 0
        n = len(buf)
        out: list[bytes] = []
        done = False
        while pos < n:
            left = self.chunk_left
            if left > 0:
                take = min(left, n - pos)
                out.append(bytes(buf[pos : pos + take]))
                pos += take
                self.chunk_left = left - take if left > take else -2
            elif left == -2:
                if n - pos < 2:
                    break
                pos += 2
                self.chunk_left = 0
            elif left == 0:
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > _MAX_CHUNK_LINE:  # a size line that never ends
                        del buf[:]
                        self._fail("malformed_sse", "bad chunked transfer encoding (a chunk-size line without end)")
                        self.abort()
                        return
                    break
                try:
                    size = int(bytes(buf[pos:i]).split(b";", 1)[0], 16)
                except ValueError:
                    del buf[:]
                    self._fail("malformed_sse", "bad chunked transfer encoding")
                    self.abort()
                    return
                pos = i + 2
                self.chunk_left = size if size else -3
            else:  # -3: trailer section after the last chunk
                if buf[pos : pos + 2] == b"\r\n":
                    pos += 2
                    done = True
                    break
                j = buf.find(b"\r\n\r\n", pos)
                if j < 0:
                    break
                pos = j + 4
                done = True
                break
        del buf[:pos]
        if out:
            self._body(out[0] if len(out) == 1 else b"".join(out), t)
        if done:
            self._finish(t)

    def _body(self, data: bytes, t: int) -> None:
        rec = self.rec
        assert rec is not None
        if self.is_sse:
            try:
                self.splitter.feed(data, t, rec.event_times_ns, rec.event_data)
            except StreamError as exc:  # an over-long line: this request fails, the connection is dropped
                self.expire(exc.kind, exc.message)
        elif len(rec.error_body) < _MAX_ERROR_BODY:
            rec.error_body += data

    def _finish(self, t: int) -> None:
        rec, cb = self.rec, self.on_done
        if rec is None or cb is None:
            return
        if self.is_sse:
            self.splitter.flush(t, rec.event_times_ns, rec.event_data)
        elif rec.status == 200 and rec.error_body:
            rec.event_times_ns.append(t)  # a non-streamed answer: one event
            rec.event_data.append(rec.error_body)
            rec.error_body = b""
        rec.end_ns = t
        self.rec = None
        self.on_done = None
        self.state = _IDLE
        if not self.keep_alive:
            self.abort()
        self.client._release(self)  # before the callback, so a closed-loop client reuses this connection
        cb(rec)

    def _fail(self, kind: str, message: str) -> None:
        rec, cb = self.rec, self.on_done
        if rec is None or cb is None:
            return
        rec.end_ns = _now()
        if not rec.error_kind:
            rec.error_kind = kind
            rec.error_message = message
        self.rec = None
        self.on_done = None
        self.state = _IDLE
        self.splitter = SSESplitter()
        cb(rec)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def expire(self, kind: str, message: str) -> None:
        """Fail the request in flight (time-out, cancellation) and drop the connection."""
        self._fail(kind, message)
        self.abort()


class OpenAIHttpClient:
    """Keep-alive connection pool plus request encoding for one OpenAI-compatible endpoint."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        extra_body: dict[str, Any] | None = None,
        continuous_usage: bool = True,
        headers: dict[str, str] | None = None,
        insecure: bool = False,
    ) -> None:
        self.endpoint = parse_base_url(url)
        self.model = model
        self.api_key = api_key
        self.timeout_ns = int(timeout_s * 1e9)
        self.extra_body = dict(extra_body or {})
        self.continuous_usage = continuous_usage
        self.headers = dict(headers or {})
        self.idle: list[_Conn] = []
        self.busy: set[_Conn] = set()
        self.connections_opened = 0
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.endpoint.tls else None
        if self._ssl is not None and insecure:  # vLLM's --insecure: no certificate check
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE
        self._pending_connects: set[asyncio.Task[None]] = set()

    # encoding ----------------------------------------------------------------------------
    def body(self, req: PerfRequest, stream: bool = True) -> dict[str, Any]:
        """The JSON body of ``req`` as it will be sent."""
        body: dict[str, Any] = {"model": self.model}
        body.update(req.payload)
        body.update(self.extra_body)
        if req.endpoint == "generate":  # SGLang's native API: sampling_params, no stream_options
            return native_body(body, stream)
        body["stream"] = stream
        if stream:
            opts: dict[str, Any] = {"include_usage": True}
            if self.continuous_usage:
                opts["continuous_usage_stats"] = True
            body["stream_options"] = opts
        return body

    def encode_raw(self, method: str, path: str, body: bytes | None = None,
                   headers: dict[str, str] | None = None) -> bytes:  # fmt: skip
        """HTTP/1.1 request bytes."""
        ep = self.endpoint
        host = ep.host if ep.port in (80, 443) else f"{ep.host}:{ep.port}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "User-Agent: lmmbench"]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        lines.append("Accept: text/event-stream, application/json")
        if self.api_key:
            lines.append(f"Authorization: Bearer {self.api_key}")
        elif ep.authorization:  # the URL's user info
            lines.append(f"Authorization: {ep.authorization}")
        lines += [f"{k}: {v}" for k, v in {**self.headers, **(headers or {})}.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")

    def encode(self, req: PerfRequest, stream: bool = True) -> bytes:
        """Request bytes of ``req``, encoded once before the load."""
        data = json.dumps(self.body(req, stream), separators=(",", ":"), ensure_ascii=False).encode()
        return self.encode_raw("POST", self.endpoint.path(req.endpoint), data, req.headers)

    # connections -------------------------------------------------------------------------
    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        _, proto = await loop.create_connection(
            lambda: _Conn(self), ep.host, ep.port, ssl=self._ssl, server_hostname=ep.host if self._ssl else None
        )
        self.connections_opened += 1
        return proto

    async def open(self, n: int) -> None:
        """Open ``n`` keep-alive connections before the load."""
        missing = n - len(self.idle) - len(self.busy)
        if missing <= 0:
            return
        sem = asyncio.Semaphore(64)

        async def one() -> _Conn:
            async with sem:
                return await self._connect()

        self.idle.extend(await asyncio.gather(*(one() for _ in range(missing))))

    def send(self, rec: RequestRecord, data: bytes, on_done: DoneCallback) -> None:
        """Send now on an idle connection, or open one (the record is marked ``new_connection``)."""
        while self.idle:
            conn = self.idle.pop()
            if conn.closed:
                continue
            self.busy.add(conn)
            conn.send(rec, data, on_done)
            return
        rec.new_connection = True
        task = asyncio.get_running_loop().create_task(self._connect_and_send(rec, data, on_done))
        self._pending_connects.add(task)
        task.add_done_callback(self._pending_connects.discard)

    async def _connect_and_send(self, rec: RequestRecord, data: bytes, on_done: DoneCallback) -> None:
        try:
            conn = await self._connect()
        except (OSError, asyncio.TimeoutError) as exc:
            rec.sent_ns = rec.end_ns = _now()
            rec.error_kind, rec.error_message = "connect", f"could not connect: {exc}"
            on_done(rec)
            return
        self.busy.add(conn)
        conn.send(rec, data, on_done)

    def _release(self, conn: _Conn) -> None:
        self.busy.discard(conn)
        if not conn.closed:
            self.idle.append(conn)

    def _discard(self, conn: _Conn) -> None:
        self.busy.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)

    def sweep(self, now_ns: int) -> int:
        """Fail requests older than the time-out; returns how many expired."""
        expired = 0
        for conn in list(self.busy):
            rec = conn.rec
            if rec is None or not rec.sent_ns:
                continue
            if now_ns - rec.sent_ns > self.timeout_ns:
                conn.expire("timeout", f"no complete response within {self.timeout_ns / 1e9:g} s")
            elif conn.splitter.stalled(now_ns):  # the SSE reader's idle bound (sse_idle_s)
                err = conn.splitter.idle_error()
                conn.expire(err.kind, err.message)
            else:
                continue
            self.busy.discard(conn)
            expired += 1
        return expired

    def cancel_all(self, reason: str = "stopped before the response completed") -> None:
        """Fail every request still in flight (after a stop and its grace period)."""
        for conn in list(self.busy):
            conn.expire("cancelled", reason)
        self.busy.clear()
        for task in list(self._pending_connects):
            task.cancel()

    def finalize(self, rec: RequestRecord, tokenizer: Any | None, keep_text: bool) -> RequestRecord:
        """Parse the raw SSE payloads of a finished record (after the load)."""
        return finalize_record(rec, tokenizer, keep_text)

    async def close(self) -> None:
        """Close every connection."""
        self.cancel_all()
        for conn in self.idle:
            conn.abort()
        self.idle.clear()
        await asyncio.sleep(0)

    async def request_once(
        self,
        req: PerfRequest | None,
        *,
        method: str = "POST",
        path: str | None = None,
        stream: bool = True,
        timeout_s: float = 10.0,
    ) -> RequestRecord:
        """One request outside the load (pre-flight checks); waits for the record."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[RequestRecord] = loop.create_future()
        rec = RequestRecord(request_id=-1)
        if req is not None:
            data = self.encode(req, stream)
        else:
            data = self.encode_raw(method, path or self.endpoint.path("models"))

        def done(r: RequestRecord) -> None:
            if not fut.done():
                fut.set_result(r)

        conn = await asyncio.wait_for(self._connect(), timeout_s)
        self.busy.add(conn)
        conn.send(rec, data, done)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            conn.expire("timeout", f"no complete response within {timeout_s:g} s")
            return rec
        finally:
            self.busy.discard(conn)
            conn.abort()
