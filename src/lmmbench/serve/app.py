"""The FastAPI app of ``lmmbench serve``: OpenAI routes over a running ``BatchEngine``.

Routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/health``, ``/metrics``.
Every failure is an OpenAI-style error object: malformed JSON, bad values, unknown model -> 400;
prompt longer than the context -> 400; body over the limit -> 413; waiting queue full -> 429 with
``Retry-After``; missing/wrong Bearer token (with ``api_key``) -> 401; an engine failure -> 500.
A client that disconnects has its request cancelled, which frees its batch slot at the next step.

The handlers are module-level functions over one ``AppState`` (the engine, the settings, the
metrics), which ``create_app`` keeps on ``app.state.lmmbench``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
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

__all__ = ["AppSettings", "AppState", "create_app"]

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


@dataclass
class AppState:
    """What every handler reads: the engine, the settings, the metrics and the per-loop event relays."""

    engine: BatchEngine
    settings: AppSettings
    stats: ServerMetrics
    relays: dict[asyncio.AbstractEventLoop, EventRelay] = field(default_factory=dict)

    @property
    def served(self) -> set[str]:
        """The model names a request may ask for."""
        return {self.settings.model_name, *self.settings.model_aliases}


def _state(request: Any) -> AppState:
    state: AppState = request.app.state.lmmbench
    return state


async def _api_error(_: Any, exc: ApiError) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _unexpected(_: Any, exc: Exception) -> Any:
    from fastapi.responses import JSONResponse

    log.exception("unexpected error")
    return JSONResponse(error_body(f"internal error: {type(exc).__name__}", "server_error"), status_code=500)


def _check_auth(state: AppState, request: Any) -> None:
    if state.settings.api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), state.settings.api_key):
        raise ApiError(401, "missing or invalid API key (Authorization: Bearer <key>)", "authentication_error")


def _queue_full(state: AppState) -> ApiError:
    state.stats.reject("queue_full")
    return ApiError(
        429, "the server's waiting queue is full; retry later", "rate_limit_error",
        code="queue_full", headers={"Retry-After": str(state.settings.retry_after_s)},
    )  # fmt: skip


async def _admit(
    state: AppState, greq: GenerationRequest, loop: asyncio.AbstractEventLoop
) -> tuple[asyncio.Queue[GenerationEvent], int]:
    """Prepare ``greq`` (off the loop when it carries media) and submit it; its events arrive on the queue."""
    engine, stats = state.engine, state.stats
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

    relay = state.relays.get(loop)
    if relay is None:
        relay = state.relays[loop] = EventRelay(loop)

    def on_event(event: GenerationEvent) -> None:
        if event.output is not None:
            stats.observe(event.output)
        relay.push(events, event)

    try:
        engine.submit(greq, on_event, prepared)
    except QueueFullError:
        raise _queue_full(state) from None
    return events, len(prepared.input_ids)


async def _stream(
    state: AppState, builder: ResponseBuilder, events: asyncio.Queue[GenerationEvent], rid: str, prompt_tokens: int
) -> AsyncIterator[str]:
    """The SSE lines of one streamed response; a stream left early cancels its request."""
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
            state.engine.cancel(rid)


async def _cancel_on_disconnect(state: AppState, request: Any, rid: str) -> None:
    while True:  # the body is read: the next message is the disconnect
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            state.engine.cancel(rid)
            return


async def _parse_request(state: AppState, request: Any, kind: str) -> tuple[Any, GenerationRequest]:
    """The validated body and its generation request; a bad one is counted and answered 400."""
    arrival = now_ns()
    _check_auth(state, request)
    data = await _read_json(request, state.settings.max_body_bytes)
    model_cls = ChatCompletionBody if kind == "chat" else CompletionBody
    try:
        body = parse_body(model_cls, data)
        if body.model not in state.served:
            raise ApiError(
                400, f"model '{body.model}' is not served here; use '{state.settings.model_name}'",
                param="model", code="model_not_found",
            )  # fmt: skip
    except ApiError:
        state.stats.reject("bad_request")
        raise
    if not state.engine.scheduler.has_room():
        raise _queue_full(state)
    prefix = "chatcmpl" if kind == "chat" else "cmpl"
    rid = f"{prefix}-{uuid.uuid4().hex}"
    try:
        return body, body.to_request(rid, arrival, state.settings.default_max_tokens)
    except (ValueError, ApiError) as exc:
        state.stats.reject("bad_request")
        raise exc if isinstance(exc, ApiError) else ApiError(400, str(exc)) from None


async def _answer_whole(state: AppState, request: Any, builder: ResponseBuilder,
                        events: asyncio.Queue[GenerationEvent], rid: str) -> Any:  # fmt: skip
    """Wait for the whole output (a client that leaves meanwhile cancels it) and answer it at once."""
    from fastapi.responses import JSONResponse, Response

    watcher = asyncio.create_task(_cancel_on_disconnect(state, request, rid))
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


async def _complete(request: Any, kind: str) -> Any:
    """One chat or text completion: parse, admit, then stream it or answer it whole."""
    from fastapi.responses import StreamingResponse
    from starlette.background import BackgroundTask

    state = _state(request)
    body, greq = await _parse_request(state, request, kind)
    rid = greq.request_id
    events, prompt_tokens = await _admit(state, greq, asyncio.get_running_loop())
    opts = body.stream_options
    builder = ResponseBuilder(
        "chat" if kind == "chat" else "completion", rid, state.settings.model_name, int(time.time()),
        include_usage=bool(body.stream and opts and opts.include_usage),
        continuous_usage=bool(body.stream and opts and opts.continuous_usage_stats),
        token_ids=body.return_tokens_as_token_ids,
    )  # fmt: skip
    if not body.stream:
        return await _answer_whole(state, request, builder, events, rid)
    return StreamingResponse(
        _stream(state, builder, events, rid, prompt_tokens),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        # a client gone before the stream started never runs the generator's finally
        background=BackgroundTask(state.engine.cancel, rid),
    )


async def chat_completions(request: Any) -> Any:
    """``POST /v1/chat/completions``."""
    return await _complete(request, "chat")


async def completions(request: Any) -> Any:
    """``POST /v1/completions``."""
    return await _complete(request, "completion")


async def models(request: Any) -> dict[str, Any]:
    """``GET /v1/models``: the one model served."""
    state = _state(request)
    _check_auth(state, request)
    return {
        "object": "list",
        "data": [{"id": state.settings.model_name, "object": "model", "created": 0, "owned_by": "lmmbench"}],
    }


async def health(request: Any) -> dict[str, Any]:
    """``GET /health``: the model and how many requests run and wait."""
    state = _state(request)
    return {
        "status": "ok",
        "model": state.settings.model_name,
        "running": len(state.engine.running),
        "waiting": state.engine.scheduler.num_waiting(),
    }


async def prometheus(request: Any) -> Any:
    """``GET /metrics``: the server's counters in the Prometheus text format."""
    from fastapi.responses import PlainTextResponse

    engine = _state(request).engine
    text = _state(request).stats.render(
        waiting=engine.scheduler.num_waiting(),
        running=len(engine.running),
        generated_total=engine.generated_tokens,
        steps=engine.steps,
        memory_bytes=engine.engine.memory_bytes,
        process_peak_memory_bytes=engine.process_peak_memory_bytes,
    )
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


ROUTES = (
    ("/v1/chat/completions", chat_completions, "POST"),
    ("/v1/completions", completions, "POST"),
    ("/v1/models", models, "GET"),
    ("/health", health, "GET"),
    ("/metrics", prometheus, "GET"),
)


def create_app(engine: BatchEngine, settings: AppSettings, metrics: ServerMetrics | None = None) -> Any:
    """The FastAPI application serving ``engine`` (which must be started)."""
    from fastapi import FastAPI, Request

    app = FastAPI(title="lmmbench serve", docs_url=None, redoc_url=None, openapi_url=None)
    stats = metrics or ServerMetrics()
    app.state.engine = engine
    app.state.metrics = stats
    app.state.lmmbench = AppState(engine, settings, stats)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(Exception, _unexpected)
    for path, endpoint, method in ROUTES:
        # the handlers are typed ``Any`` (fastapi is imported lazily): give FastAPI the real Request class
        endpoint.__annotations__ = {"request": Request}
        app.add_api_route(path, endpoint, methods=[method], response_model=None)
    return app
