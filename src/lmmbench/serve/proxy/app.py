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
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from lmmbench.backends.sse import SSESplitter
from lmmbench.core.errors import UserError, require
from lmmbench.serve.proxy.measure import Measure, StreamRelay, WholeAnswer

__all__ = ["ProxyConfig", "check_upstream", "create_proxy_app", "run_proxy", "upstream_base"]

_now = time.perf_counter_ns
_PASS_HEADERS = ("authorization", "content-type", "accept")


class ProxyConfig(BaseModel):
    """Run a measuring proxy in front of an OpenAI-compatible server: every answer gets server-side metrics."""

    model_config = ConfigDict(extra="forbid")

    upstream: str = Field(description="Base URL of the server to measure, e.g. http://127.0.0.1:8000 (or .../v1).")
    host: str = Field("127.0.0.1", description="Address to bind; anything but loopback is exposed to the network.")
    port: int = Field(8001, ge=0, le=65535, description="TCP port.")


def upstream_base(url: str) -> str:
    """``http://host:port`` (plus any path prefix) of an upstream URL given with or without ``/v1``;
    ``UserError`` for anything that is not an http(s) URL."""
    parts = urlsplit(url.strip())
    bad = UserError(f"--upstream {url!r}: expected the server's URL, e.g. http://127.0.0.1:8000")
    try:
        _ = parts.port
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme}://{parts.netloc}{path}"


def check_upstream(base: str, timeout_s: float = 5.0) -> None:
    """``UserError`` when nothing answers at ``base`` (any HTTP answer of ``/v1/models`` or ``/health`` will do:
    ``transformers serve`` answers ``/v1/models`` with 500 until its cache folder exists)."""
    last = ""
    for path in ("/v1/models", "/health"):
        try:
            with urllib.request.urlopen(base + path, timeout=timeout_s):
                return
        except urllib.error.HTTPError:
            return
        except (OSError, ValueError) as exc:
            last = str(getattr(exc, "reason", None) or exc)
    raise UserError(f"--upstream {base}: nothing answers there ({last}); start the server first")


def _headers(request: Any) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() in _PASS_HEADERS}


def _whole_only(body: dict[str, Any]) -> bool:
    """A request without a first generated token to watch (echoed prompt log-probs, no new tokens)."""
    return bool(body.get("echo")) or body.get("max_tokens") == 0 or body.get("max_completion_tokens") == 0


async def _relay_stream(resp: Any, relay: StreamRelay, measure: Measure, memory: Any, key: int | None,
                        ) -> AsyncIterator[bytes]:  # fmt: skip
    """Forward the upstream's SSE events as they arrive; the held end of the stream goes out with ``metrics``."""
    splitter = SSESplitter()
    times: list[int] = []
    datas: list[bytes] = []
    try:
        async for data in resp.content.iter_any():
            splitter.feed(data, _now(), times, datas)
            out = b"".join(relay.feed(t, d) for t, d in zip(times, datas, strict=True))
            times.clear()
            datas.clear()
            if out:
                yield out
        splitter.flush(_now(), times, datas)
        out = b"".join(relay.feed(t, d) for t, d in zip(times, datas, strict=True))
        measure.device_peak_memory_bytes = memory.end(key)
        key = None
        yield out + relay.finish(measure.metrics())
    finally:
        memory.end(key)
        resp.release()


def _release(resp: Any, memory: Any, key: int | None) -> None:
    """Free a streamed request's upstream connection and memory slot (a no-op when the stream did)."""
    memory.end(key)
    resp.release()


async def _collect(resp: Any, measure: Measure, whole: WholeAnswer) -> None:
    """Read a streamed upstream answer to its end into ``whole``, timing it."""
    splitter = SSESplitter()
    times: list[int] = []
    datas: list[bytes] = []
    async for data in resp.content.iter_any():
        splitter.feed(data, _now(), times, datas)
    splitter.flush(_now(), times, datas)
    for t, payload in zip(times, datas, strict=True):
        if payload == b"[DONE]":
            measure.end_ns = t
            continue
        try:
            obj = json.loads(payload)
        except ValueError:
            continue
        if isinstance(obj, dict):
            measure.see(t, obj)
            whole.feed(obj)


class _Proxy:
    """The proxy's state: the upstream base URL, one HTTP session to it, the GPU memory reader."""

    def __init__(self, base: str, memory: Any) -> None:
        self.base = base
        self.memory = memory
        self.session: Any = None

    async def start(self) -> None:
        import aiohttp

        # no connection limit: a pool cap would queue requests inside the proxy, in its own measured TTFT
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))  # fmt: skip

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        self.memory.close()

    async def passthrough(self, request: Any) -> Any:
        """A GET route answered by the upstream as it is."""
        from fastapi.responses import Response

        async with self.session.get(self.base + request.url.path, headers=_headers(request)) as resp:
            content = await resp.read()
            return Response(content, status_code=resp.status, media_type=resp.headers.get("content-type"))

    async def complete(self, request: Any) -> Any:
        """A chat or text completion, forwarded and measured."""
        from fastapi.responses import JSONResponse, Response, StreamingResponse

        measure = Measure(_now())
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        url = self.base + request.url.path
        if not isinstance(body, dict):  # the upstream's own answer to a malformed body
            return await self._forward_raw(url, raw, request)
        stream, whole_only = bool(body.get("stream")), _whole_only(body)
        if whole_only and not stream:
            return await self._forward_whole(url, body, request, measure)
        opts = dict(body.get("stream_options") or {})
        asked_usage = bool(opts.get("include_usage"))
        upstream_body = {**body, "stream": True, "stream_options": {**opts, "include_usage": True}}
        key = self.memory.begin()
        try:
            resp = await self.session.post(url, json=upstream_body, headers=_headers(request))
        except BaseException:
            self.memory.end(key)
            raise
        if resp.status != 200:
            self.memory.end(key)
            content = await resp.read()
            resp.release()
            return Response(content, status_code=resp.status, media_type=resp.headers.get("content-type"))
        if "event-stream" not in resp.headers.get("content-type", ""):  # an upstream that does not stream
            measure.token_seen = False
            try:
                content = await resp.read()
                measure.end_ns = _now()
            finally:
                measure.device_peak_memory_bytes = self.memory.end(key)
                resp.release()
            return _with_metrics(200, resp.headers.get("content-type"), content, measure)
        if stream:
            from starlette.background import BackgroundTask

            relay = StreamRelay(measure, drop_usage=not asked_usage)
            return StreamingResponse(_relay_stream(resp, relay, measure, self.memory, key),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                                     # a client gone before the stream started never runs the generator's finally
                                     background=BackgroundTask(_release, resp, self.memory, key))  # fmt: skip
        whole = WholeAnswer(chat=request.url.path.endswith("/chat/completions"))
        try:
            await _collect(resp, measure, whole)
        finally:
            measure.device_peak_memory_bytes = self.memory.end(key)
            resp.release()
        return JSONResponse(whole.body(measure.usage, measure.metrics()))

    async def _forward_raw(self, url: str, raw: bytes, request: Any) -> Any:
        from fastapi.responses import Response

        async with self.session.post(url, data=raw, headers=_headers(request)) as resp:
            return Response(await resp.read(), status_code=resp.status, media_type=resp.headers.get("content-type"))

    async def _forward_whole(self, url: str, body: dict[str, Any], request: Any, measure: Measure) -> Any:
        """A whole answer with no first token to see: latency, usage and memory only."""
        measure.token_seen = False
        key = self.memory.begin()
        try:
            async with self.session.post(url, json=body, headers=_headers(request)) as resp:
                content = await resp.read()
                measure.end_ns = _now()
                status, media = resp.status, resp.headers.get("content-type")
        finally:
            measure.device_peak_memory_bytes = self.memory.end(key)
        return _with_metrics(status, media, content, measure)


async def _unreachable(request: Any, exc: Exception) -> Any:
    from fastapi.responses import JSONResponse

    base = request.app.state.proxy.base
    message = f"the upstream {base} did not answer: {type(exc).__name__}: {exc}"
    return JSONResponse({"error": {"message": message, "type": "upstream_error", "code": 502}}, status_code=502)


def _with_metrics(status: int, media: str | None, content: bytes, measure: Measure) -> Any:
    """A whole upstream answer with ``metrics`` added (a non-200 or non-JSON one as it came)."""
    from fastapi.responses import JSONResponse, Response

    try:
        answer = json.loads(content) if status == 200 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return Response(content, status_code=status, media_type=media)
    measure.see(measure.end_ns, {"usage": answer.get("usage")})
    return JSONResponse({**answer, "metrics": measure.metrics()})


def create_proxy_app(base: str, memory: Any | None = None) -> Any:
    """The FastAPI app of a proxy in front of ``base``; ``memory`` reads GPU memory (default: NVML if present)."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request

    from lmmbench.serve.proxy.memory import GpuMemoryPeaks

    proxy = _Proxy(base, memory if memory is not None else GpuMemoryPeaks())

    @asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        await proxy.start()
        try:
            yield
        finally:
            await proxy.close()

    app = FastAPI(title="lmmbench proxy", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    async def complete(request: Any) -> Any:
        return await proxy.complete(request)

    async def passthrough(request: Any) -> Any:
        return await proxy.passthrough(request)

    for endpoint in (complete, passthrough):  # annotations are strings here: give FastAPI the real class
        endpoint.__annotations__ = {"request": Request, "return": Any}

    for path in ("/v1/chat/completions", "/v1/completions"):
        app.add_api_route(path, complete, methods=["POST"], response_model=None)
    for path in ("/v1/models", "/health", "/metrics"):
        app.add_api_route(path, passthrough, methods=["GET"], response_model=None)
    app.state.proxy = proxy
    import aiohttp

    app.add_exception_handler(aiohttp.ClientError, _unreachable)
    app.add_exception_handler(asyncio.TimeoutError, _unreachable)
    return app


def run_proxy(cfg: ProxyConfig) -> None:
    """Check the upstream answers, then serve the proxy in the foreground until interrupted."""
    require("fastapi", "serve")
    require("uvicorn", "serve")
    require("aiohttp", "serve")
    import uvicorn

    from lmmbench.core.net import ensure_port_free

    base = upstream_base(cfg.upstream)
    check_upstream(base)
    ensure_port_free(cfg.host, cfg.port)
    if cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {cfg.host}: anyone who can reach this port can use {base} through it (the "
              f"client's Authorization header is passed on)", file=sys.stderr, flush=True)  # fmt: skip
    app = create_proxy_app(base)
    gpu = "NVML" if app.state.proxy.memory.available else f"none: {app.state.proxy.memory.reason}"
    print(f"lmmbench proxy: http://{cfg.host}:{cfg.port} -> {base} (peak GPU memory: {gpu})", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning",
                                           access_log=False, timeout_keep_alive=30))  # fmt: skip
    server.run()
    if not server.started:
        raise UserError(f"could not listen on {cfg.host}:{cfg.port} (in use, or not allowed)")
