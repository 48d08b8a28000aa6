"""The FastAPI app of ``lmmbench serve``: OpenAI routes over a running ``BatchEngine``.

Routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/health``, ``/metrics``.
Every failure is an OpenAI-style error object: malformed JSON, bad values, unknown model -> 400;
prompt longer than the context -> 400; body over the limit -> 413; waiting queue full -> 429 with
``Retry-After``; missing/wrong Bearer token (with ``api_key``) -> 401; an engine failure -> 500.
A client that disconnects has its request cancelled, which frees its batch slot at the next step.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from lmmbench.core.clock import now_ns
from lmmbench.engines.batch_engine import BatchEngine, ContextLengthError
from lmmbench.engines.inputs import InputError
from lmmbench.engines.requests import GenerationEvent, GenerationRequest
from lmmbench.engines.scheduler import QueueFullError
from lmmbench.serve.metrics import ServerMetrics
from lmmbench.serve.protocol import ApiError, ChatCompletionBody, CompletionBody, error_body, parse_body
from lmmbench.serve.relay import EventRelay, drain_merged
from lmmbench.serve.responses import ResponseBuilder, sse

__all__ = ["AppSettings", "create_app"]

log = logging.getLogger(__name__)


@dataclass
class AppSettings:
    """What the app needs besides the engine."""

    model_name: str
    model_aliases: tuple[str, ...] = ()
    api_key: str | None = None
    max_body_bytes: int = 16 * 1024 * 1024
    default_max_tokens: int = 256
    retry_after_s: int = 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def _read_json(request: Any, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    from starlette.requests import ClientDisconnect

    size = 0
    parts: list[bytes] = []
    try:
        async for piece in request.stream():
            size += len(piece)
            if size > limit:
                raise ApiError(413, f"request body exceeds the limit of {limit} bytes")
            parts.append(piece)
    except ClientDisconnect:  # fewer bytes than Content-Length, then gone: nobody to answer, nothing went wrong
        raise ApiError(400, f"the client left after {size} of {declared} body bytes") from None
    raw = b"".join(parts)
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise ApiError(400, "malformed JSON body: nested too deeply") from None


def create_app(engine: BatchEngine, settings: AppSettings, metrics: ServerMetrics | None = None) -> Any:
    """The FastAPI application serving ``engine`` (which must be started)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.background import BackgroundTask

    app = FastAPI(title="lmmbench serve", docs_url=None, redoc_url=None, openapi_url=None)
    stats = metrics or ServerMetrics()
    app.state.engine = engine
    app.state.metrics = stats
    served = {settings.model_name, *settings.model_aliases}
    relays: dict[asyncio.AbstractEventLoop, EventRelay] = {}

    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}", "server_error"), status_code=500)

    def _check_auth(request: Request) -> None:
        if settings.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), settings.api_key):
            raise ApiError(401, "missing or invalid API key (Authorization: Bearer <key>)", "authentication_error")

    def _queue_full() -> ApiError:
        stats.reject("queue_full")
        return ApiError(
            429, "the server's waiting queue is full; retry later", "rate_limit_error",
            code="queue_full", headers={"Retry-After": str(settings.retry_after_s)},
        )  # fmt: skip

    async def _admit(
        greq: GenerationRequest, loop: asyncio.AbstractEventLoop
    ) -> tuple[asyncio.Queue[GenerationEvent], int]:
        heavy = greq.messages is not None and any(isinstance(m.get("content"), list) for m in greq.messages)
        try:
            if heavy:
                prepared = await asyncio.to_thread(engine.prepare, greq)
            else:
                prepared = engine.prepare(greq)
        except ContextLengthError as exc:
            stats.reject("context_length")
            raise ApiError(400, str(exc), param="messages", code="context_length_exceeded") from None
        except (InputError, ValueError) as exc:
            stats.reject("bad_request")
            raise ApiError(400, str(exc)) from None
        events: asyncio.Queue[GenerationEvent] = asyncio.Queue()

        relay = relays.get(loop)
        if relay is None:
            relay = relays[loop] = EventRelay(loop)

        def on_event(event: GenerationEvent) -> None:
            if event.output is not None:
                stats.observe(event.output)
            relay.push(events, event)

        try:
            engine.submit(greq, on_event, prepared)
        except QueueFullError:
            raise _queue_full() from None
        return events, len(prepared.input_ids)

    async def _stream(
        builder: ResponseBuilder, events: asyncio.Queue[GenerationEvent], rid: str, prompt_tokens: int
    ) -> AsyncIterator[str]:
        finished = False
        try:
            if builder.kind == "chat":
                yield sse(builder.role_chunk(prompt_tokens))
            while True:
                event = drain_merged(await events.get(), events)
                if event.text_delta:
                    yield builder.content_sse(event.text_delta, event.prompt_tokens, event.completion_tokens)
                if event.output is not None:
                    finished = True
                    if event.output.finish_reason == "error":
                        yield sse(error_body(event.output.error or "engine failure", "server_error"))
                    else:
                        for chunk in builder.final_chunks(event.output):
                            yield sse(chunk)
                    break
            yield sse("[DONE]")
        finally:
            if not finished:
                engine.cancel(rid)

    async def _cancel_on_disconnect(request: Request, rid: str) -> None:
        while True:  # the body is read: the next message is the disconnect
            message = await request.receive()
            if message.get("type") == "http.disconnect":
                engine.cancel(rid)
                return

    async def _complete(request: Request, kind: str) -> Response:
        arrival = now_ns()
        _check_auth(request)
        data = await _read_json(request, settings.max_body_bytes)
        model_cls = ChatCompletionBody if kind == "chat" else CompletionBody
        try:
            body = parse_body(model_cls, data)
            if body.model not in served:
                raise ApiError(
                    400, f"model '{body.model}' is not served here; use '{settings.model_name}'",
                    param="model", code="model_not_found",
                )  # fmt: skip
        except ApiError:
            stats.reject("bad_request")
            raise
        if not engine.scheduler.has_room():
            raise _queue_full()
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        rid = f"{prefix}-{uuid.uuid4().hex}"
        try:
            greq = body.to_request(rid, arrival, settings.default_max_tokens)
        except (ValueError, ApiError) as exc:
            stats.reject("bad_request")
            raise exc if isinstance(exc, ApiError) else ApiError(400, str(exc)) from None
        loop = asyncio.get_running_loop()
        events, prompt_tokens = await _admit(greq, loop)
        opts = body.stream_options
        builder = ResponseBuilder(
            "chat" if kind == "chat" else "completion", rid, settings.model_name, int(time.time()),
            include_usage=bool(body.stream and opts and opts.include_usage),
            continuous_usage=bool(body.stream and opts and opts.continuous_usage_stats),
        )  # fmt: skip
        if body.stream:
            return StreamingResponse(
                _stream(builder, events, rid, prompt_tokens),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                # a client gone before the stream started never runs the generator's finally
                background=BackgroundTask(engine.cancel, rid),
            )
        watcher = asyncio.create_task(_cancel_on_disconnect(request, rid))
        try:
            while True:
                event = await events.get()
                if event.output is not None:
                    break
        finally:
            watcher.cancel()
        if event.output.finish_reason == "abort":
            return Response(status_code=499)  # the client is gone; nobody reads this
        if event.output.finish_reason == "error":
            return JSONResponse(error_body(event.output.error or "engine failure", "server_error"), status_code=500)
        return JSONResponse(builder.full(event.output))

    async def chat_completions(request: Request) -> Response:
        return await _complete(request, "chat")

    async def completions(request: Request) -> Response:
        return await _complete(request, "completion")

    async def models(request: Request) -> dict[str, Any]:
        _check_auth(request)
        return {
            "object": "list",
            "data": [{"id": settings.model_name, "object": "model", "created": 0, "owned_by": "lmmbench"}],
        }

    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": settings.model_name,
            "running": len(engine.running),
            "waiting": engine.scheduler.num_waiting(),
        }

    async def prometheus() -> PlainTextResponse:
        text = stats.render(
            waiting=engine.scheduler.num_waiting(),
            running=len(engine.running),
            generated_total=engine.generated_tokens,
            steps=engine.steps,
            memory_bytes=engine.engine.memory_bytes,
            peak_memory_bytes=engine.peak_memory_bytes,
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(Exception, _unexpected)
    routes = [
        ("/v1/chat/completions", chat_completions, "POST"),
        ("/v1/completions", completions, "POST"),
        ("/v1/models", models, "GET"),
        ("/health", health, "GET"),
        ("/metrics", prometheus, "GET"),
    ]
    for path, endpoint, method in routes:
        # this module uses postponed annotations: give FastAPI the real Request class
        endpoint.__annotations__ = {k: Request for k in endpoint.__annotations__ if k == "request"}
        app.add_api_route(path, endpoint, methods=[method], response_model=None)
    return app
