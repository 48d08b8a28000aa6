"""Typed per-request records of the load generator, every instant in ``perf_counter_ns``.

``PerfRequest`` is what is sent; ``RequestRecord`` is what happened to it. The hot path only
fills the raw fields (instants and the raw SSE ``data`` payloads with their arrival instants);
``finalize_record`` (in ``lmmbench.backends.openai_stream``) parses them after the load, so no
JSON is decoded while requests are being scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ERROR_KINDS", "PerfRequest", "RequestRecord"]

#: Every error kind a record can carry (``""`` means success).
ERROR_KINDS = (
    "http_4xx",
    "http_5xx",
    "timeout",
    "disconnect",
    "connect",
    "malformed_sse",
    "server_error_event",
    "empty_response",
    "cancelled",
)


@dataclass(slots=True)
class PerfRequest:
    """One request of a benchmark: the JSON body (without model/stream) and what is expected."""

    request_id: int
    payload: dict[str, Any]
    endpoint: str = "chat"  # "chat" -> /v1/chat/completions, "completions" -> /v1/completions
    input_tokens: int | None = None  # prompt length as the dataset counted it
    output_tokens: int | None = None  # requested output length (max_tokens)
    labels: dict[str, Any] = field(default_factory=dict)
    # workload structure (multi-turn conversations, trace replay); None/0: an independent request
    arrival_ns: int | None = None  # trace replay: send at t0 + arrival_ns (the rate is not used)
    turn: int = 0  # multi-turn: 0 for a conversation's first request (only those are scheduled)
    next_turn: int | None = None  # multi-turn: index of the request sent after this one completes
    think_ns: int = 0  # multi-turn: pause between this request's completion and the next turn
    follows_replies: bool = False  # multi-turn: this turn's messages go after the conversation so far, replies too
    headers: dict[str, str] = field(default_factory=dict)  # HTTP headers of this request only
    stream: bool = True  # False: asked for one whole response (its TTFT is its E2E latency: no token is seen earlier)
    attempts: int = 1  # sends at most, the request sent again after a transport failure (connect, disconnect, timeout)


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Instants are ``perf_counter_ns`` (0 = never happened)."""

    request_id: int
    worker: int = 0
    warmup: bool = False
    scheduled_ns: int = 0  # target send time from the arrival process (or when a closed-loop client freed)
    slot_ns: int = 0  # when a concurrency slot was granted (== scheduled_ns without a cap)
    sent_ns: int = 0  # just before the request bytes were written
    first_byte_ns: int = 0  # first response byte (headers)
    first_token_ns: int = 0  # first chunk with any generated text (content or reasoning)
    first_content_ns: int = 0  # first chunk with visible content
    end_ns: int = 0  # response complete (or failed)
    new_connection: bool = False  # a connection had to be opened for this request after the start
    status: int = 0
    error_kind: str = ""
    error_message: str = ""
    # raw stream, filled on the hot path, parsed by finalize_record
    event_times_ns: list[int] = field(default_factory=list)
    event_data: list[bytes] = field(default_factory=list)
    error_body: bytes = b""
    # parsed results
    chunk_times_ns: list[int] = field(default_factory=list)  # chunks that carried generated text
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in each of those chunks
    input_tokens: int | None = None  # dataset count
    prompt_tokens: int | None = None  # server usage.prompt_tokens
    output_tokens: int = 0  # server usage, else continuous usage, else tokenizer, else chunks
    reasoning_tokens: int = 0
    token_source: str = ""  # "usage" | "continuous_usage" | "tokenizer" | "chunks"
    output_chars: int = 0
    finish_reason: str = ""
    saw_done: bool = False
    output_text: str = ""
    labels: dict[str, Any] = field(default_factory=dict)
    cached_tokens: int | None = None  # prompt tokens the server says it served from its cache (SGLang's meta_info)
    cached_tokens_details: dict[str, Any] | None = None  # SGLang's per-tier split (device / host / storage)
    server_metrics: dict[str, Any] | None = None  # the response's own ``metrics`` (lmmbench serve / proxy), as sent
    attempts: int = 1  # times sent (> 1 only for a PerfRequest with attempts > 1); the instants are the last send's

    @property
    def ok(self) -> bool:
        """True when the request completed without error."""
        return not self.error_kind
