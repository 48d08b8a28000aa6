"""Turn the raw SSE payloads of a record into chunks, token counts and an error kind (after the load).

Token counts per chunk, best source first:
1. ``continuous_usage``: the server's cumulative ``usage.completion_tokens`` on every chunk (vLLM's
   ``stream_options.continuous_usage_stats``);
2. ``tokenizer``: the whole output text tokenised ONCE with a local tokenizer, each token assigned to
   the chunk where its last character arrived (never re-tokenising a chunk on its own, which would add
   a BOS or split words differently per chunk);
3. ``usage``: the server's final ``completion_tokens`` spread over the chunks in proportion to their text;
4. ``chunks``: one token per chunk (no usage, no tokenizer: ITL is then an inter-chunk latency).
The total output tokens is the server's usage when present, else the sum of the per-chunk counts.
"""

from __future__ import annotations

import bisect
import json
from typing import Any

from lmmbench.backends.sglang_native import native_event
from lmmbench.core.request_records import RequestRecord

__all__ = ["finalize_record", "split_proportional"]


def split_proportional(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` over ``weights`` (largest remainder), at least 1 each when total allows."""
    n = len(weights)
    if n == 0:
        return []
    if total <= 0:
        return [0] * n
    if total < n:
        out = [0] * n
        order = sorted(range(n), key=lambda i: -weights[i])
        for i in order[:total]:
            out[i] = 1
        return out
    wsum = sum(max(w, 1) for w in weights)
    base = [1] * n
    rest = total - n
    raw = [rest * max(w, 1) / wsum for w in weights]
    floors = [int(r) for r in raw]
    left = rest - sum(floors)
    order = sorted(range(n), key=lambda i: -(raw[i] - floors[i]))
    for i in order[:left]:
        floors[i] += 1
    return [b + f for b, f in zip(base, floors, strict=False)]


def _error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return body[:300].decode("utf-8", "replace").strip()
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return str(obj)[:300]


def finalize_record(rec: RequestRecord, tokenizer: Any | None = None, keep_text: bool = False) -> RequestRecord:
    """Parse ``rec.event_data`` into chunks and token counts; set the error kind; drop raw payloads."""
    if rec.status and rec.status != 200 and not rec.error_kind:
        rec.error_kind = "http_4xx" if 400 <= rec.status < 500 else "http_5xx"
        rec.error_message = f"HTTP {rec.status}: {_error_message(rec.error_body)}"
    texts: list[str] = []
    reasoning_flags: list[bool] = []
    cum_usage: list[int | None] = []
    usage: dict[str, Any] | None = None
    content_seen = False
    native_text = ""  # SGLang's native /generate: the cumulative text so far
    for t, data in zip(rec.event_times_ns, rec.event_data, strict=False):
        if data == b"[DONE]":
            rec.saw_done = True
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            if not rec.error_kind:
                rec.error_kind = "malformed_sse"
                rec.error_message = f"not JSON: {data[:120]!r}"
            continue
        if not isinstance(obj, dict):
            if not rec.error_kind:
                rec.error_kind, rec.error_message = "malformed_sse", f"not an object: {data[:120]!r}"
            continue
        if obj.get("error") is not None:
            if not rec.error_kind:
                rec.error_kind = "server_error_event"
                rec.error_message = _error_message(data)
            continue
        _cached_tokens(obj, rec)
        if isinstance(obj.get("metrics"), dict):  # server-side metrics (lmmbench serve / proxy): the last one wins
            rec.server_metrics = obj["metrics"]
        if "choices" not in obj and isinstance(obj.get("meta_info"), dict):  # SGLang's native /generate event
            obj, native_text = native_event(obj, native_text)
        u = obj.get("usage")
        if isinstance(u, dict):
            usage = u
        choices = obj.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            continue
        ch = choices[0]
        content, reasoning = _choice_text(ch)
        if ch.get("finish_reason"):
            rec.finish_reason = str(ch["finish_reason"])
        if not content and not reasoning:
            continue  # role-only, empty or usage-only chunks are not tokens
        if not rec.first_token_ns:
            rec.first_token_ns = t
        if content and not content_seen:
            rec.first_content_ns = t
            content_seen = True
        rec.chunk_times_ns.append(t)
        texts.append(reasoning + content)
        reasoning_flags.append(bool(reasoning) and not content)
        cum = u.get("completion_tokens") if isinstance(u, dict) else None
        cum_usage.append(cum if isinstance(cum, int) else None)
    rec.output_chars = sum(len(x) for x in texts)
    if keep_text:
        rec.output_text = "".join(texts)
    if usage is not None:
        pt = usage.get("prompt_tokens")
        rec.prompt_tokens = pt if isinstance(pt, int) else None
    final_total = usage.get("completion_tokens") if usage is not None else None
    n = len(texts)
    counts, rec.token_source = _chunk_token_counts(texts, cum_usage, tokenizer, final_total)
    rec.chunk_tokens = counts
    rec.output_tokens = final_total if isinstance(final_total, int) else sum(counts)
    rec.reasoning_tokens = sum(c for c, r in zip(counts, reasoning_flags, strict=False) if r)
    if not rec.error_kind and rec.status == 200 and not n:
        rec.error_kind, rec.error_message = "empty_response", "the stream carried no generated text"
    rec.event_data = []
    rec.error_body = b""
    return rec


def _cached_tokens(obj: dict[str, Any], rec: RequestRecord) -> None:
    """SGLang's cached prompt tokens, as its bench client reads them: ``meta_info.cached_tokens`` (and
    ``cached_tokens_details``) of its native API, ``sglext.cached_tokens_details`` (device + host + storage) of its
    OpenAI API; the last event that carries them wins."""
    meta = obj.get("meta_info")
    if isinstance(meta, dict) and isinstance(meta.get("cached_tokens"), int):
        rec.cached_tokens = meta["cached_tokens"]
        details = meta.get("cached_tokens_details")
        rec.cached_tokens_details = details if isinstance(details, dict) else None
    ext = obj.get("sglext")
    details = ext.get("cached_tokens_details") if isinstance(ext, dict) else None
    if isinstance(details, dict) and details:
        rec.cached_tokens = sum(int(details.get(k) or 0) for k in ("device", "host", "storage"))
        rec.cached_tokens_details = details


def _choice_text(ch: dict[str, Any]) -> tuple[str, str]:
    """The generated text and reasoning text of one choice of a chunk (streamed ``delta`` or whole ``message``)."""
    delta = ch.get("delta") or ch.get("message") or {}
    if not isinstance(delta, dict):
        delta = {}
    content = delta.get("content") or ch.get("text") or ""
    reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
    if not isinstance(content, str):
        content = json.dumps(content)
    if not isinstance(reasoning, str):
        reasoning = str(reasoning)
    return content, reasoning


def _chunk_token_counts(
    texts: list[str], cum_usage: list[int | None], tokenizer: Any | None, final_total: Any
) -> tuple[list[int], str]:
    """Tokens per chunk and where the counts came from, best source first: the server's cumulative
    usage on every chunk, the tokenizer, the final usage split by characters, else one per chunk."""
    n = len(texts)
    if n and all(c is not None for c in cum_usage):
        prev = 0
        counts: list[int] = []
        for c in cum_usage:
            assert c is not None
            counts.append(max(c - prev, 0))
            prev = max(prev, c)
        return counts, "continuous_usage"
    if n and tokenizer is not None:
        return _tokenizer_counts(tokenizer, texts), "tokenizer"
    if n and isinstance(final_total, int):
        return split_proportional(final_total, [len(x) for x in texts]), "usage"
    return [1] * n, "chunks"


def _tokenizer_counts(tokenizer: Any, texts: list[str]) -> list[int]:
    """Tokenise the concatenated text once; count tokens by the chunk holding their last character."""
    ends: list[int] = []
    pos = 0
    for x in texts:
        pos += len(x)
        ends.append(pos)
    enc = tokenizer.encode("".join(texts), add_special_tokens=False)
    counts = [0] * len(texts)
    for _start, end in enc.offsets:
        idx = bisect.bisect_left(ends, max(end, 1))
        counts[min(idx, len(texts) - 1)] += 1
    return counts
