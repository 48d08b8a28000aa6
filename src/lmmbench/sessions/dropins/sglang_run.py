"""What ``lmmbench bench sglang`` does around and inside the load for SGLang's request and run flags: the requests
as SGLang's client sends them (headers, routing keys, LoRA adapters, streamed or not), SGLang's warm-up followed
by the cache flush (``--flush-cache``), and the profiler POSTs before and after the load. What to send is decided
by ``config.dropins.sglang_run``; this module sends it."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from lmmbench.config.dropins.sglang_run import (
    ROUTING_KEY_HEADER,
    flush_target,
    lora_names,
    profile_calls,
    request_headers,
    routing_key_prefix,
)
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest

__all__ = ["post", "profile", "sglang_requests", "warmup_and_flush"]

#: SGLang's warm-up asks for at most this many output tokens (``min(output_len, 32)``)
_WARMUP_MAX_TOKENS = 32


def _build(cfg: PerfConfig) -> list[PerfRequest]:
    """The requests perf would build from ``cfg`` (the same data set code, the same count)."""
    from lmmbench.datasets.perf.catalog import build_requests
    from lmmbench.datasets.perf.registry import load_tokenizer

    tok = load_tokenizer(cfg.tokenizer) if cfg.tokenizer is not None else None
    n = cfg.num_requests if cfg.num_requests is not None else (1000 if cfg.duration_s else 100)
    return build_requests(cfg, n, tok)


def sglang_requests(ns: argparse.Namespace, cfg: PerfConfig,
                    requests: list[PerfRequest] | None = None) -> list[PerfRequest] | None:  # fmt: skip
    """``requests`` (built from ``cfg`` when None) as SGLang's client sends them: ``--header``'s headers, the
    routing key of a shared-prefix group (``--gsp-send-routing-key``), one LoRA adapter each (``--lora-name``:
    as the body's ``model`` and ``lora_path``, only ``lora_path`` on the native API), ``stream`` false with
    ``--disable-stream``. None when no flag changes a request and none were given (perf builds them)."""
    headers = request_headers(ns)
    route = routing_key_prefix() if ns.gsp_send_routing_key and ns.dataset_name == "generated-shared-prefix" else None
    if requests is None and not (headers or route or ns.lora_name or ns.disable_stream):
        return None
    reqs = requests if requests is not None else _build(cfg)
    loras = lora_names(ns, len(reqs))
    for i, r in enumerate(reqs):
        r.headers = {**r.headers, **headers}
        if route is not None and "prefix_group" in r.labels:
            r.headers[ROUTING_KEY_HEADER] = f"{route}_{r.labels['prefix_group']}"
        if loras is not None:
            r.payload = {**r.payload, "lora_path": loras[i]}
            if r.endpoint != "generate":  # SGLang's OpenAI backends: the adapter is also the model asked for
                r.payload["model"] = loras[i]
        r.stream = not ns.disable_stream
    return reqs


def post(url: str, body: dict[str, Any] | None, flag: str) -> None:
    """POST ``body`` as JSON (no body when None) to ``url``; a refusal or an unreachable server is one line."""
    data = None if body is None else json.dumps(body).encode()
    hdrs = {} if body is None else {"Content-Type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data or b"", method="POST", headers=hdrs),
                                    timeout=600):  # fmt: skip
            pass
    except (urllib.error.URLError, OSError) as exc:
        hint = " start the server with its profiler enabled (SGLang: SGLANG_TORCH_PROFILER_DIR)" if "profile" in flag \
            else ""  # fmt: skip
        raise UserError(f"{flag}: POST {url} failed ({exc});{hint or ' is the server the one benchmarked?'}") from None


def profile(ns: argparse.Namespace, base_url: str, start: bool) -> list[str]:
    """Start (or stop) the server's profiler as SGLang does; returns the URLs called."""
    calls = profile_calls(ns, base_url, start)
    for url, body in calls:
        print(f"async_request_profile api_url={url!r} body={body!r}", file=sys.stderr)  # SGLang prints it too
        post(url, body, "--profile")
    return [url for url, _ in calls]


async def _warmup(cfg: PerfConfig, first: PerfRequest, n: int) -> int:
    """``n`` copies of the first request (at most 32 output tokens) at the run's concurrency cap; how many ok."""
    from lmmbench.backends.openai_stream import finalize_record
    from lmmbench.loadgen.protocol import make_client

    req = copy.deepcopy(first)
    for key in ("max_tokens", "min_tokens"):
        if isinstance(req.payload.get(key), int):
            req.payload[key] = min(req.payload[key], _WARMUP_MAX_TOKENS)
    client: Any = make_client("openai-http", url=cfg.url, model=cfg.model or "", api_key=cfg.api_key,
                              timeout_s=cfg.timeout_s, extra_body=cfg.extra_body)  # fmt: skip
    cap = asyncio.Semaphore(cfg.concurrency or n)

    async def one() -> bool:
        async with cap:
            rec = await client.request_once(req, stream=req.stream, timeout_s=cfg.timeout_s)
            return finalize_record(rec).ok

    return sum(await asyncio.gather(*(one() for _ in range(n))))


def warmup_and_flush(ns: argparse.Namespace, cfg: PerfConfig, requests: list[PerfRequest] | None) -> PerfConfig:
    """With a cache flush to do (``--flush-cache``): SGLang's warm-up, then the flush, before the load, and the
    config the load then runs with (no warm-up of its own). Unchanged ``cfg`` without a flush."""
    url = flush_target(ns, cfg.url)
    if url is None:
        return cfg
    if cfg.warmup_requests:
        from lmmbench.backends.readiness import wait_for_server

        wait_for_server(cfg.url, cfg.model, cfg.wait_for_server, api_key=cfg.api_key)
        first = copy.deepcopy((requests or _build(cfg.model_copy(update={"num_requests": 1})))[0])
        if ns.lora_name:  # SGLang warms up with the first adapter
            first.payload["lora_path"] = ns.lora_name[0]
            if first.endpoint != "generate":
                first.payload["model"] = ns.lora_name[0]
        if cfg.model is None:
            from lmmbench.loadgen.api import preflight

            cfg = cfg.model_copy(update={"model": preflight(cfg).model})
        if not asyncio.run(_warmup(cfg, first, cfg.warmup_requests)):
            raise UserError("Warmup failed - Please make sure benchmark arguments are correctly specified "
                            "(no warm-up request succeeded)")  # fmt: skip
    post(url, None, "--flush-cache")
    return cfg.model_copy(update={"warmup_requests": 0})
