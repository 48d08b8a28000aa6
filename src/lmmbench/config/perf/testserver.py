"""Configuration of the shipped OpenAI-compatible test server (``lmmbench testserver``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["FAULT_KINDS", "TestServerConfig"]

#: Faults the test server can inject, each at its own rate (fraction of requests).
FAULT_KINDS = ("http_400", "http_429", "http_500", "disconnect", "malformed", "stall", "error_event")


class TestServerConfig(BaseModel):
    """An OpenAI-compatible streaming server with injected, exactly timed latencies and faults."""

    model_config = ConfigDict(extra="forbid")
    __test__ = False  # not a pytest test class

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port.")
    model: str = Field("test-model", description="Model name served; other names get HTTP 404.")
    accept_any_model: bool = Field(False, description="Accept any model name.")
    ttft_ms: float = Field(20.0, ge=0, description="Delay from request arrival to the first content chunk.")
    itl_ms: float = Field(5.0, ge=0, description="Delay between consecutive output tokens.")
    tokens_per_chunk: int = Field(1, ge=1, description="Tokens carried by each content chunk.")
    output_tokens: int = Field(16, ge=1, description="Output length when the request gives no max_tokens.")
    reasoning_tokens: int = Field(0, ge=0, description="First N output tokens sent as reasoning_content.")
    role_chunk: bool = Field(True, description="Send a role-only chunk as soon as the request arrives.")
    usage: bool = Field(True, description="Send usage when the request asks for it (include_usage).")
    continuous_usage: bool = Field(True, description="Honour stream_options.continuous_usage_stats.")
    reject_continuous_usage: bool = Field(
        False, description="Answer 400 to continuous_usage_stats (like servers that reject unknown fields)."
    )
    reject_ignore_eos: bool = Field(
        False, description="Answer 400 to ignore_eos / min_tokens (like the OpenAI API, which rejects them)."
    )
    send_done: bool = Field(True, description="End streams with 'data: [DONE]'.")
    faults: dict[str, float] = Field(
        default_factory=dict,
        description="Injected fault rates, e.g. http_500=0.1,disconnect=0.05; kinds: " + ", ".join(FAULT_KINDS),
    )
    max_streams: int = Field(
        0, ge=0, description="Serve at most N streams at once per process; others queue (0: no limit)."
    )
    workers: int = Field(1, ge=1, le=64, description="Server processes sharing the port (SO_REUSEPORT).")
    loop: Literal["auto", "asyncio", "uvloop"] = Field("auto", description="Event loop (auto: uvloop if installed).")
    timer: Literal["timerfd", "adaptive", "spin"] = Field(
        "timerfd",
        description="timerfd: one Linux timerfd at absolute instants (exact, cheap; falls back to adaptive "
        "elsewhere); adaptive: loop timers woken early by a lead that tracks their ~1 ms rounding (exact on "
        "average); spin: wake 1 ms early and yield until the instant (exact, costs CPU).",
    )
    timer_lead_us: float = Field(-1.0, description="Initial timer lead (-1: per event loop default).")
    prefill_ms_per_token: float = Field(
        0.0, ge=0, description="Extra TTFT per uncached prompt token (word): TTFT = ttft_ms + uncached x this."
    )
    prefix_cache: bool = Field(False, description="Model a prefix cache: cached prompt blocks cost no prefill.")
    prefix_block_tokens: int = Field(16, ge=1, description="Prefix-cache block size (prompt words).")
    kv_capacity_tokens: int = Field(1_000_000, ge=1, description="Modelled KV cache size (tokens): usage and eviction.")
    metrics_names: Literal["none", "vllm", "sglang", "tgi", "all", "vllm-legacy"] = Field(
        "none", description="Serve GET /metrics (running/waiting, KV usage, prefix hits) under these names "
        "(vllm-legacy: the deprecated vLLM names that telemetry reads only as fallbacks)."
    )
    metrics_engines: int = Field(
        1, ge=1, le=64, description="Label /metrics as this many engines (data parallel): the load, the KV cache "
        "and the counters are split between them, one label set each.",
    )
    spec_draft_tokens: int = Field(
        0, ge=0, le=16, description="With --metrics-names vllm: speculative decoding of this many draft tokens per "
        "step in /metrics (vllm:spec_decode_num_*_total), each accepted with --spec-acceptance.",
    )
    spec_acceptance: float = Field(0.5, ge=0, le=1, description="Acceptance rate of each draft token (0..1).")
    logprobs_reference: Path | None = Field(
        None, description="A `reference dump` folder: /v1/completions with logprobs answers its log-probabilities "
        "(for tests of `reference compare --url`).")
    logprob_shift: float = Field(0.0, description="With --logprobs-reference: added to every log-probability.")
    diverge_at_step: int | None = Field(
        None, ge=0, description="With --logprobs-reference: generate the second-best token from this step on.")
    answers: Path | None = Field(None, description="JSON {prompt text: answer}: streamed answers to those prompts "
                                 "are correct (testing/answer_key.py).")
    correct_below_inflight: int = Field(0, ge=0, description="--answers: correct only while at most N requests "
                                        "are in flight (0: always).")

    @field_validator("faults")
    @classmethod
    def _check_faults(cls, v: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, rate in v.items():
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault '{kind}'; known: {', '.join(FAULT_KINDS)}")
            r = float(rate)
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"fault rate of '{kind}' must be in [0, 1]")
            out[kind] = r
        if sum(out.values()) > 1.0 + 1e-9:
            raise ValueError("fault rates add up to more than 1")
        return out
