"""SGLang's native ``/generate`` API (``python -m sglang.bench_serving --backend sglang``), in both directions.

A request is built as an OpenAI completions body (``prompt``, ``max_tokens``, sampling fields) and sent as
SGLang's native one: ``{"text": ..., "sampling_params": {...}, "stream": true}`` plus any other field at the top
(SGLang's ``--extra-request-body`` lands there too). Its streamed answer carries the CUMULATIVE text and
``meta_info.completion_tokens`` on every event; ``native_event`` turns one event into the OpenAI chunk shape
``finalize_record`` reads (the new text only, and the cumulative token count as continuous usage), so per-token
timing works as it does for vLLM's continuous usage.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SAMPLING_KEYS", "native_body", "native_event"]

#: OpenAI body fields that SGLang's native API takes inside ``sampling_params`` (under its own names).
SAMPLING_KEYS = {
    "max_tokens": "max_new_tokens", "min_tokens": "min_new_tokens", "ignore_eos": "ignore_eos",
    "temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
    "frequency_penalty": "frequency_penalty", "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty", "stop": "stop",
}  # fmt: skip


def native_body(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    """The native ``/generate`` body of a completions-shaped ``body`` (its ``model`` is dropped: one model)."""
    sampling = {SAMPLING_KEYS[k]: v for k, v in body.items() if k in SAMPLING_KEYS}
    rest = {k: v for k, v in body.items() if k not in SAMPLING_KEYS and k not in ("model", "prompt", "stream")}
    prompt = body.get("prompt", "")
    key = "input_ids" if isinstance(prompt, list) else "text"
    return {key: prompt, "sampling_params": sampling, **rest, "stream": stream}


def native_event(obj: dict[str, Any], seen_text: str) -> tuple[dict[str, Any], str]:
    """One native event as an OpenAI completions chunk, and the cumulative text so far."""
    meta = obj.get("meta_info") or {}
    text = obj.get("text")
    text = text if isinstance(text, str) else seen_text
    new = text[len(seen_text):] if text.startswith(seen_text) else text
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        finish = finish.get("type")
    usage = {k: meta[k] for k in ("prompt_tokens", "completion_tokens") if isinstance(meta.get(k), int)}
    chunk: dict[str, Any] = {"choices": [{"index": 0, "text": new, "finish_reason": finish}]}
    if "completion_tokens" in usage:
        chunk["usage"] = usage
    return chunk, text
