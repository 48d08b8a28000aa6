"""The test server's side of SGLang's native ``/generate`` API: a native request read as the completions request
the server already answers, and each streamed event written as SGLang writes it (the cumulative text so far and
``meta_info`` with the prompt and completion token counts)."""

from __future__ import annotations

import json
from typing import Any

from lmmbench.config.perf.testserver import TestServerConfig

__all__ = ["native_event_bytes", "native_request", "server_info"]


def native_request(req: dict[str, Any], model: str) -> dict[str, Any]:
    """``{"text", "sampling_params", "stream"}`` as a completions request (no usage stream options)."""
    raw = req.get("sampling_params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out: dict[str, Any] = {"model": model, "prompt": req.get("text", ""), "stream": bool(req.get("stream"))}
    if isinstance(req.get("input_ids"), list):
        out["prompt"] = " ".join(str(i) for i in req["input_ids"])
    if "max_new_tokens" in params:
        out["max_tokens"] = params["max_new_tokens"]
    if params.get("ignore_eos"):
        out["ignore_eos"] = True
    return out


def native_event_bytes(rid: str, prompt_tokens: int, cum_tokens: int, finish: str | None, words: list[str],
                       cached_tokens: int = 0) -> bytes:  # fmt: skip
    """One native event (or a whole native answer): the text of the first ``cum_tokens`` tokens and SGLang's
    ``meta_info`` (``cached_tokens``: the prompt tokens the prefix cache held)."""
    text = "".join(" " + words[j % len(words)] for j in range(cum_tokens))
    meta: dict[str, Any] = {"id": rid, "finish_reason": None if finish is None else {"type": finish},
                            "prompt_tokens": prompt_tokens, "completion_tokens": cum_tokens,
                            "cached_tokens": cached_tokens}  # fmt: skip
    return json.dumps({"text": text, "meta_info": meta, "index": 0}, separators=(",", ":")).encode()


def server_info(cfg: TestServerConfig) -> dict[str, Any]:
    """SGLang's ``GET /server_info`` as far as its bench client reads it: the speculative-decoding accept length
    (1 + draft tokens x acceptance, the test server's model) in ``internal_states``."""
    state: dict[str, Any] = {}
    if cfg.spec_draft_tokens:
        state["avg_spec_accept_length"] = 1 + cfg.spec_draft_tokens * cfg.spec_acceptance
    return {"model_path": cfg.model, "served_model_name": cfg.model, "internal_states": [state]}
