"""A real OpenAI-compatible HTTP server on 127.0.0.1 backed by a real tiny model, for the endpoint tests.

``/v1/completions`` answers ``echo`` + ``logprobs`` with prompt log-probs computed by the model (vLLM's
response shape); with ``logprobs_supported=False``, plain completions without them (like servers
that lack prompt log-probs); with ``refuse_logprobs=True``, a 400 (like ``lmmbench serve``).
``/v1/chat/completions`` and ``/v1/models`` are there too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web


def _greedy(loaded: Any, ids: list[int], max_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = loaded.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=int(loaded.tokenizer.eos_token_id),
        )
    return [int(x) for x in out[0, len(ids) :]]


def _echo_logprobs(loaded: Any, ids: list[int]) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        lp = F.log_softmax(loaded.model(torch.tensor([ids])).logits[0], dim=-1)
    tok = loaded.tokenizer
    token_logprobs: list[float | None] = [None]
    tops: list[dict[str, float] | None] = [None]
    for i in range(1, len(ids)):
        row = lp[i - 1]
        token_logprobs.append(float(row[ids[i]]))
        best = int(row.argmax())
        tops.append({tok.decode([best]): float(row[best])})
    return {"tokens": [tok.decode([t]) for t in ids], "token_logprobs": token_logprobs, "top_logprobs": tops}


def make_app(loaded: Any, name: str, logprobs_supported: bool = True, refuse_logprobs: bool = False,
             max_model_len: int | None = None, received: list[dict[str, Any]] | None = None) -> web.Application:
    """The aiohttp application (``max_model_len``: reported in /v1/models, as vLLM does; ``received``: each POST's
    path and JSON body is appended to it, for tests that assert what reached the server)."""
    tok = loaded.tokenizer

    @web.middleware
    async def record(request: web.Request, handler: Any) -> web.StreamResponse:
        if received is not None and request.method == "POST":
            received.append({"path": request.path, "body": await request.json()})
        return await handler(request)  # type: ignore[no-any-return]

    async def models(_: web.Request) -> web.Response:
        entry: dict[str, Any] = {"id": name, "object": "model"}
        if max_model_len is not None:
            entry["max_model_len"] = max_model_len
        return web.json_response({"object": "list", "data": [entry]})

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        if refuse_logprobs and body.get("logprobs") is not None:  # as lmmbench serve answers
            error = {"message": "logprobs: logprobs are not supported", "param": "logprobs"}
            return web.json_response({"error": error}, status=400)
        prompt = body["prompt"]
        ids = list(prompt) if isinstance(prompt, list) else list(tok.encode(prompt))
        max_tokens = int(body.get("max_tokens", 16))
        gen = _greedy(loaded, ids, max_tokens)
        text = tok.decode(gen, skip_special_tokens=True)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
        if body.get("echo") and body.get("logprobs") is not None and logprobs_supported:
            choice["logprobs"] = _echo_logprobs(loaded, ids + gen)
        if body.get("echo"):
            choice["text"] = tok.decode(ids) + text
        return web.json_response({"object": "text_completion", "model": name, "choices": [choice]})

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        messages = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        text_prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        gen = _greedy(loaded, list(tok.encode(text_prompt)), int(body.get("max_tokens", 16)))
        msg = {"role": "assistant", "content": tok.decode(gen, skip_special_tokens=True)}
        return web.json_response({"object": "chat.completion", "choices": [{"index": 0, "message": msg}]})

    app = web.Application(middlewares=[record])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@contextmanager
def serve_app(app: Any, port: int) -> Iterator[str]:
    """Run an aiohttp ``app`` in a thread on 127.0.0.1:port; yields its base URL; shuts it down after."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(30):
        raise RuntimeError("test server did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@contextmanager
def serve(
    loaded: Any, port: int, name: str = "tiny-llm", logprobs_supported: bool = True, refuse_logprobs: bool = False,
    max_model_len: int | None = None, received: list[dict[str, Any]] | None = None,
) -> Iterator[str]:
    """Run the server in a thread on 127.0.0.1:port; yields its base URL; shuts it down after."""
    with serve_app(make_app(loaded, name, logprobs_supported, refuse_logprobs, max_model_len, received),
                   port) as url:
        yield url
