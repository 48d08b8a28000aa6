"""``lmmbench proxy``: an OpenAI-compatible measuring proxy in front of any engine (VLMHyperBench's "Inference API
Wrapper": every backend wrapped in one FastAPI proxy that measures TTFT, TPOT, latency and peak memory on the
worker's side and returns them with each answer).

Routes: ``POST /v1/chat/completions`` and ``/v1/completions`` (streamed or not), forwarded to ``--upstream``
(vLLM, SGLang, TGI, ``transformers serve``, llama.cpp, ``lmmbench serve`` / ``testserver``); ``GET /v1/models``,
``/health`` and ``/metrics`` passed through. Every answer gets the ``metrics`` object of lmmbench's own server
(``serve.proxy.measure``): in the body of a whole answer, on the last chunk before ``[DONE]`` of a streamed one. A
whole answer is asked of the upstream as a stream (with ``include_usage``) so that its first token is seen, then
rebuilt; one that has no first token to see (``echo``, ``max_tokens: 0``) is forwarded whole, with TTFT and TPOT
null, as is the answer of an upstream that answers a stream request with one JSON body (no SSE). An upstream error
is passed through as the upstream said it, without ``metrics``; an upstream that cannot be reached (or breaks off
before answering) is a 502 with an OpenAI-style error object.

Every request's work is bounded by the limits table (``serve.proxy.bounds``): its body (``body_bytes``, 413), the
body's nesting (``json_depth``), each line of the upstream's stream (``sse_line_bytes``, read by the one SSE reader,
``backends.sse``), the upstream's silence (``sse_idle_s``), the answer read or rebuilt (``answer_bytes``) and the
list indexes it names (``answer_index``). A malformed client request is a 400 naming the field; an upstream answer
the proxy cannot use a 502 naming what was wrong (inside a stream already started: an ``error`` event, then the
end). Each failed request is one line on stderr, never a traceback; large JSON is parsed off the event loop, so one
request never holds up the others (``/health`` included).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from lmmbench.backends.sse import SSESplitter, StreamError, read_events
from lmmbench.config.limits import limit_value
from lmmbench.core.errors import UserError, require
from lmmbench.serve.proxy.bounds import OFF_LOOP_BYTES, ProxyError, parse_client_body, read_body
from lmmbench.serve.proxy.measure import AnswerError, Measure, StreamRelay, WholeAnswer, parse_event
from lmmbench.serve.proxy.startup import (
    Upstream,
    bind_socket,
    check_upstream,
    parse_upstream,
    upstream_base,
)

__all__ = ["ProxyConfig", "check_upstream", "create_proxy_app", "run_proxy", "upstream_base"]

_now = time.perf_counter_ns
_PASS_HEADERS = ("authorization", "content-type", "accept")


class ProxyConfig(BaseModel):
    """Run a measuring proxy in front of an OpenAI-compatible server: every answer gets server-side metrics."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(description="Base URL of the server to measure, e.g. http://127.0.0.1:8000 (or .../v1); "
                                      "user:password@ in it is sent as HTTP basic credentials, never printed.")
    host: str = Field("127.0.0.1", description="Address to bind; anything but loopback is exposed to the network.")
    port: int = Field(8001, ge=0, le=65535, description="TCP port (0: a free one, printed at start).")


def _log(request: Any, status: int, message: str) -> None:
    """One line per failed request on stderr."""
    print(f"lmmbench proxy: {request.method} {request.url.path} -> {status}: {message}", file=sys.stderr, flush=True)


def _sse_event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _reader(resp: Any, first: bytes) -> Callable[[], Awaitable[bytes]]:
    """The upstream body's reads, starting with the ``first`` bytes already read."""
    pending = [first] if first else []

    async def read() -> bytes:
        if pending:
            return pending.pop()
        data: bytes = await resp.content.readany()
        return data

    return read


async def _first_bytes(resp: Any) -> bytes:
    """The first bytes of the upstream's body, within the idle bound."""
    idle = limit_value("sse_idle_s")
    try:
        data: bytes = await asyncio.wait_for(resp.content.readany(), idle)
    except asyncio.TimeoutError:
        raise StreamError("stream_idle", f"the upstream sent no byte of its answer for {idle} s (limit sse_idle_s; "
                                         "raise it with LMMBENCH_LIMIT_SSE_IDLE_S=N)") from None  # fmt: skip
    return data


async def _read_bounded(resp: Any, first: bytes = b"") -> bytes:
    """The rest of the upstream's body after ``first``, within ``answer_bytes`` and the idle bound."""
    bound = limit_value("answer_bytes")
    read = _reader(resp, first)
    idle = limit_value("sse_idle_s")
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            data = await asyncio.wait_for(read(), idle)
        except asyncio.TimeoutError:
            raise StreamError("stream_idle", f"the upstream went silent for {idle} s (limit sse_idle_s)") from None
        if not data:
            return b"".join(parts)
        size += len(data)
        if size > bound:
            raise AnswerError(f"the answer exceeds {bound} bytes (limit answer_bytes; raise it with "
                              "LMMBENCH_LIMIT_ANSWER_BYTES=N)")  # fmt: skip
        parts.append(data)


async def _parse(payload: bytes) -> Any:
    """One event's JSON (None when not JSON), parsed off the event loop when large."""
    if len(payload) < OFF_LOOP_BYTES:
        return parse_event(payload)
    return await asyncio.to_thread(parse_event, payload)


async def _relay_events(batch: list[tuple[int, bytes]], relay: StreamRelay) -> bytes:
    out = []
    for t, payload in batch:
        if payload == b"[DONE]" or len(payload) < OFF_LOOP_BYTES:
            out.append(relay.feed(t, payload))
        else:
            out.append(relay.feed_parsed(t, payload, await _parse(payload)))
    return b"".join(out)


async def _collect(resp: Any, first: bytes, measure: Measure, whole: WholeAnswer) -> None:
    """Read a streamed upstream answer to its end into ``whole``, timing it; ``AnswerError`` for one it cannot
    rebuild (not JSON, an error event, no event at all, past ``answer_bytes``)."""
    bound = limit_value("answer_bytes")
    size = events = 0
    async for batch in read_events(_reader(resp, first), SSESplitter()):
        for t, payload in batch:
            events += 1
            if payload == b"[DONE]":
                measure.end_ns = t
                continue
            size += len(payload)
            if size > bound:
                raise AnswerError(f"the answer exceeds {bound} bytes (limit answer_bytes)")
            obj = await _parse(payload)
            if not isinstance(obj, dict):
                what = "not JSON" if obj is None else f"a JSON {type(obj).__name__}, not an object"
                raise AnswerError(f"event {events} of the stream is {what}: {payload[:80]!r}")
            if obj.get("error") is not None:
                raise AnswerError(f"event {events} is an error: {json.dumps(obj['error'])[:300]}")
            measure.see(t, obj)
            whole.feed(obj, events)
    if not events:
        raise AnswerError("the stream ended without an event")


def _upstream_failure(base: str, exc: BaseException) -> ProxyError:
    """The 502 (or 500, for a fault of the proxy's own) that ends a request on ``exc``."""
    import aiohttp

    if isinstance(exc, ProxyError):
        return exc
    if isinstance(exc, StreamError):
        return ProxyError(502, f"the upstream {base}'s stream ended: {exc.message}")
    if isinstance(exc, AnswerError):
        return ProxyError(502, f"the upstream {base}'s answer: {exc}")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return ProxyError(502, f"the upstream {base}'s answer broke off: {exc}")
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return ProxyError(502, f"the upstream {base} went silent for {limit_value('sse_idle_s')} s (limit "
                               "sse_idle_s)")  # fmt: skip
    if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, OSError)):
        return ProxyError(502, f"the upstream {base} did not answer: {type(exc).__name__}: {exc}")
    return ProxyError(500, f"proxy error: {type(exc).__name__}: {exc}")


class _Proxy:
    """The proxy's state: the upstream, one HTTP session to it, the GPU memory reader."""

    def __init__(self, up: Upstream, memory: Any) -> None:
        self.up = up
        self.base = up.base
        self.memory = memory
        self.session: Any = None

    async def start(self) -> None:
        import aiohttp

        # no connection limit: a pool cap would queue requests inside the proxy, in its own measured TTFT
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=limit_value("sse_idle_s"))
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        self.memory.close()

    def headers(self, request: Any) -> dict[str, str]:
        """The client's headers passed on, with the upstream URL's credentials unless the client sent its own."""
        out = {k: v for k, v in request.headers.items() if k.lower() in _PASS_HEADERS}
        if self.up.authorization and not any(k.lower() == "authorization" for k in out):
            out["Authorization"] = self.up.authorization
        return out

    async def guarded(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """``handler(request)``, any failure turned into one logged line and an OpenAI-style error answer."""
        from fastapi.responses import JSONResponse

        try:
            return await handler(request)
        except Exception as exc:  # every failure of one request ends that request only
            err = _upstream_failure(self.base, exc)
            _log(request, err.status, err.message)
            return JSONResponse(err.body(), status_code=err.status)

    async def passthrough(self, request: Any) -> Any:
        """A GET route answered by the upstream as it is."""
        from fastapi.responses import Response

        async with self.session.get(self.base + request.url.path, headers=self.headers(request)) as resp:
            content = await _read_bounded(resp)
            return Response(content, status_code=resp.status, media_type=resp.headers.get("content-type"))

    async def complete(self, request: Any) -> Any:
        """A chat or text completion, forwarded and measured."""
        measure = Measure(_now())
        body = await parse_client_body(await read_body(request))
        url = self.base + request.url.path
        stream = bool(body.get("stream"))
        if not stream and (bool(body.get("echo")) or body.get("max_tokens") == 0
                           or body.get("max_completion_tokens") == 0):  # fmt: skip
            return await self._forward_whole(url, body, request, measure)
        opts = dict(body.get("stream_options") or {})
        relay = StreamRelay(measure, drop_usage=not opts.get("include_usage"))
        upstream_body = {**body, "stream": True, "stream_options": {**opts, "include_usage": True}}
        key = self.memory.begin()
        handed = False
        resp: Any = None
        try:
            resp = await self.session.post(url, json=upstream_body, headers=self.headers(request))
            if resp.status != 200:
                return await self._upstream_said(request, resp)
            first = await _first_bytes(resp)
            if "event-stream" not in resp.headers.get("content-type", "") or first.lstrip()[:1] in (b"{", b"["):
                measure.token_seen = False  # an upstream that answers whole: no first token to see
                content = await _read_bounded(resp, first)
                measure.end_ns = _now()
                measure.device_peak_memory_bytes, key = self.memory.end(key), None
                return await _with_metrics(200, resp.headers.get("content-type"), content, measure)
            if stream:
                handed = True
                return self._streaming(request, resp, first, relay, key)
            whole = WholeAnswer(chat=request.url.path.endswith("/chat/completions"))
            await _collect(resp, first, measure, whole)
            measure.device_peak_memory_bytes, key = self.memory.end(key), None
            return await _json_response(whole.body(measure.usage, measure.metrics()))
        finally:
            if not handed:
                self.memory.end(key)
                if resp is not None:
                    resp.release()

    def _streaming(self, request: Any, resp: Any, first: bytes, relay: StreamRelay, key: int | None) -> Any:
        from fastapi.responses import StreamingResponse
        from starlette.background import BackgroundTask

        return StreamingResponse(self._relay(request, resp, first, relay, key), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                                 # a client gone before the stream started never runs the generator's finally
                                 background=BackgroundTask(self._release, resp, key))  # fmt: skip

    def _release(self, resp: Any, key: int | None) -> None:
        """Free a streamed request's upstream connection and memory slot (a no-op when the stream did)."""
        self.memory.end(key)
        resp.release()

    async def _relay(self, request: Any, resp: Any, first: bytes, relay: StreamRelay, key: int | None,
                     ) -> AsyncIterator[bytes]:  # fmt: skip
        """Forward the upstream's SSE events as they arrive; the held end goes out with ``metrics``. A failure
        mid-stream (status 200 already sent) ends the stream with an ``error`` event and one logged line."""
        try:
            async for batch in read_events(_reader(resp, first), SSESplitter()):
                out = await _relay_events(batch, relay)
                if out:
                    yield out
            relay.measure.device_peak_memory_bytes = self.memory.end(key)
            key = None
            yield relay.finish(relay.measure.metrics())
        except Exception as exc:  # this stream ends; the others go on
            err = _upstream_failure(self.base, exc)
            _log(request, err.status, err.message)
            yield _sse_event(err.body())
        finally:
            self.memory.end(key)
            resp.release()

    async def _upstream_said(self, request: Any, resp: Any) -> Any:
        """An upstream error answer, passed on as the upstream said it (and logged in one line)."""
        from fastapi.responses import Response

        content = await _read_bounded(resp)
        _log(request, resp.status, f"the upstream answered HTTP {resp.status}: {content[:200]!r}")
        return Response(content, status_code=resp.status, media_type=resp.headers.get("content-type"))

    async def _forward_whole(self, url: str, body: dict[str, Any], request: Any, measure: Measure) -> Any:
        """A whole answer with no first token to see: latency, usage and memory only."""
        measure.token_seen = False
        key = self.memory.begin()
        try:
            async with self.session.post(url, json=body, headers=self.headers(request)) as resp:
                if resp.status != 200:
                    return await self._upstream_said(request, resp)
                content = await _read_bounded(resp)
                measure.end_ns = _now()
                media = resp.headers.get("content-type")
        finally:
            measure.device_peak_memory_bytes = self.memory.end(key)
        return await _with_metrics(200, media, content, measure)


async def _json_response(obj: dict[str, Any]) -> Any:
    """A JSON answer, written off the event loop when large."""
    from fastapi.responses import Response

    def dump() -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    big = sum(len(c.get("message", {}).get("content") or c.get("text") or "") for c in obj.get("choices", [])
              if isinstance(c, dict)) >= OFF_LOOP_BYTES  # fmt: skip
    return Response(await asyncio.to_thread(dump) if big else dump(), media_type="application/json")


async def _with_metrics(status: int, media: str | None, content: bytes, measure: Measure) -> Any:
    """A whole upstream 200 answer with ``metrics`` added; 502 when it is not a JSON object."""
    answer = await _parse(content)
    if not isinstance(answer, dict):
        raise AnswerError(f"a 200 answer ({media or 'no content type'}) that is not a JSON object: {content[:80]!r}")
    measure.see(measure.end_ns, {"usage": answer.get("usage")})
    return await _json_response({**answer, "metrics": measure.metrics()})


def create_proxy_app(base: str | Upstream, memory: Any | None = None) -> Any:
    """The FastAPI app of a proxy in front of ``base``; ``memory`` reads GPU memory (default: NVML if present)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request

    from lmmbench.serve.proxy.memory import GpuMemoryPeaks

    up = base if isinstance(base, Upstream) else parse_upstream(base)
    proxy = _Proxy(up, memory if memory is not None else GpuMemoryPeaks())

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        await proxy.start()
        try:
            yield
        finally:
            await proxy.close()

    app = FastAPI(title="lmmbench proxy", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    async def complete(request: Any) -> Any:
        return await proxy.guarded(request, proxy.complete)

    async def passthrough(request: Any) -> Any:
        return await proxy.guarded(request, proxy.passthrough)

    for endpoint in (complete, passthrough):  # annotations are strings here: give FastAPI the real class
        endpoint.__annotations__ = {"request": Request, "return": Any}

    for path in ("/v1/chat/completions", "/v1/completions"):
        app.add_api_route(path, complete, methods=["POST"], response_model=None)
    for path in ("/v1/models", "/health", "/metrics"):
        app.add_api_route(path, passthrough, methods=["GET"], response_model=None)
    app.state.proxy = proxy
    return app


def run_proxy(cfg: ProxyConfig) -> None:
    """Check the upstream answers with a models list, bind the port, then serve in the foreground until
    interrupted; the printed address is the bound one (``--port 0``: the free port it got)."""
    require("fastapi", "serve")
    require("uvicorn", "serve")
    require("aiohttp", "serve")
    import uvicorn

    up = parse_upstream(cfg.upstream)
    check_upstream(up)
    sock = bind_socket(cfg.host, cfg.port)
    if cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {cfg.host}: anyone who can reach this port can use {up.base} through it (the "
              f"client's Authorization header is passed on)", file=sys.stderr, flush=True)  # fmt: skip
    app = create_proxy_app(up)
    gpu = "NVML" if app.state.proxy.memory.available else f"none: {app.state.proxy.memory.reason}"
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    print(f"lmmbench proxy: http://{host}:{sock.getsockname()[1]} -> {up.base} (peak GPU memory: {gpu})", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=30))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise UserError(f"could not serve on {cfg.host}:{cfg.port}")
