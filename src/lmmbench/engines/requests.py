"""Typed requests, outputs and per-request state of the batching engine.

A ``GenerationRequest`` is what a user of the engine submits (the built-in server, accuracy
evaluation, episodic evaluation). ``GenerationOutput`` is what comes back, with server-side
``RequestMetrics``. ``RequestState`` is the engine's private bookkeeping of one request while it
waits, runs and finishes. Nothing here imports torch.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Literal

from lmmbench.core.clock import now_ns, ns_to_ms

__all__ = [
    "FinishReason",
    "GenerationEvent",
    "GenerationOutput",
    "GenerationRequest",
    "PreparedInput",
    "RequestMetrics",
    "RequestState",
    "SamplingParams",
    "TokenLogprob",
]

FinishReason = Literal["stop", "length", "abort", "error"]

_ids = itertools.count()


@dataclass
class SamplingParams:
    """How the next token is chosen and when generation stops.

    ``temperature == 0`` (or ``top_k == 1``) is greedy. ``top_k <= 0`` and ``top_p >= 1`` disable
    those filters. ``seed`` makes sampling reproducible per request, whatever else is in the batch.
    ``stop`` strings end generation and are not part of the returned text. ``min_tokens`` forbids
    end-of-sequence before that many tokens; ``ignore_eos`` never stops at end-of-sequence.
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None  # return each chosen token's log-probability and this many top ones (0: none)

    @property
    def greedy(self) -> bool:
        """Whether the choice is the arg-max of the logits."""
        return self.temperature <= 0.0 or self.top_k == 1

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad value."""
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if self.temperature < 0.0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < -1:
            raise ValueError("top_k must be -1, 0 (off) or a positive count")
        if self.min_tokens < 0 or self.min_tokens > self.max_tokens:
            raise ValueError("min_tokens must be between 0 and max_tokens")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop strings must be non-empty strings")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError("logprobs must be between 0 and 20")


@dataclass
class GenerationRequest:
    """One generation job: a chat (OpenAI-style ``messages``), a plain ``prompt`` or token ids.

    ``messages`` follow the OpenAI chat format; content parts may be ``text``, ``image_url`` (a data
    URI) and ``input_audio`` (base64 WAV/FLAC). ``arrival_ns`` (``perf_counter_ns``) is when the
    request reached the system; it defaults to the moment of submission.
    """

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = ""
    arrival_ns: int | None = None
    add_generation_prompt: bool = True

    def __post_init__(self) -> None:
        if not self.request_id:
            self.request_id = f"req-{next(_ids)}"
        given = sum(x is not None for x in (self.messages, self.prompt, self.prompt_token_ids))
        if given != 1:
            raise ValueError("give exactly one of messages, prompt, prompt_token_ids")


@dataclass
class PreparedInput:
    """Model-ready input of one request: token ids and extra tensors (pixel values, audio features)."""

    input_ids: list[int]
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    preprocess_ms: float = 0.0

    @property
    def multimodal(self) -> bool:
        """Whether the input carries images, video or audio."""
        return bool(self.model_kwargs)


@dataclass
class RequestMetrics:
    """Server-side timings of one request (milliseconds from its arrival) and its token counts.

    ``tpot_ms`` is None for fewer than two output tokens (no interval to measure); ``process_peak_memory_bytes`` is
    the largest reading of this process's memory (its CUDA allocator's on GPU, its resident set on CPU; not the
    whole device's, which the measuring proxy reports as ``device_peak_memory_bytes``) taken right after each
    engine forward the request took part in, None when no reading was taken (the request never reached a forward)
    or memory cannot be read."""

    queue_ms: float
    ttft_ms: float
    tpot_ms: float | None
    e2e_ms: float
    prompt_tokens: int
    completion_tokens: int
    process_peak_memory_bytes: int | None
    preprocess_ms: float = 0.0

    def as_dict(self) -> dict[str, float | int | None]:
        """The metrics object returned in every response (null where unmeasured)."""
        return {
            "queue_ms": round(self.queue_ms, 3),
            "ttft_ms": round(self.ttft_ms, 3),
            "tpot_ms": None if self.tpot_ms is None else round(self.tpot_ms, 3),
            "e2e_ms": round(self.e2e_ms, 3),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "process_peak_memory_bytes": self.process_peak_memory_bytes,
            "preprocess_ms": round(self.preprocess_ms, 3),
        }


@dataclass
class GenerationOutput:
    """The finished result of one request."""

    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    metrics: RequestMetrics
    error: str | None = None
    logprobs: list[TokenLogprob] | None = None  # per generated token, when the request asked for them


@dataclass
class TokenLogprob:
    """One generated token's log-probability (of the model's distribution, before sampling's temperature or
    filters, as vLLM reports by default) and the ``top`` most likely tokens at its step: (id, text, log-prob)."""

    token_id: int
    text: str
    logprob: float
    top: list[tuple[int, str, float]]


@dataclass
class GenerationEvent:
    """What one engine step produced for one request (streaming unit)."""

    request_id: str
    text_delta: str
    new_token_ids: list[int]
    completion_tokens: int
    prompt_tokens: int
    output: GenerationOutput | None = None  # set on the last event of a request

    @property
    def finished(self) -> bool:
        """Whether this is the request's last event."""
        return self.output is not None


@dataclass
class RequestState:
    """The engine's bookkeeping of one request (private to engines)."""

    request: GenerationRequest
    prepared: PreparedInput
    arrival_ns: int = field(default_factory=now_ns)
    scheduled_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    finish_ns: int | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted_chars: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None
    process_peak_memory_bytes: int | None = None  # None until a reading is taken during one of its forwards
    sampler_state: Any = None
    logprobs: list[TokenLogprob] = field(default_factory=list)  # filled when ``sampling.logprobs`` is set

    @property
    def request_id(self) -> str:
        """The request's id."""
        return self.request.request_id

    @property
    def sampling(self) -> SamplingParams:
        """The request's sampling parameters."""
        return self.request.sampling

    @property
    def prompt_tokens(self) -> int:
        """Number of prompt tokens (including image/audio placeholder tokens)."""
        return len(self.prepared.input_ids)

    def metrics(self) -> RequestMetrics:
        """Timings so far, in milliseconds from arrival."""
        end = self.finish_ns if self.finish_ns is not None else now_ns()
        sched = self.scheduled_ns if self.scheduled_ns is not None else end
        first = self.first_token_ns if self.first_token_ns is not None else end
        last = self.last_token_ns if self.last_token_ns is not None else first
        n = len(self.output_ids)
        tpot = ns_to_ms(last - first) / (n - 1) if n > 1 else None  # one token: no interval to measure
        return RequestMetrics(
            queue_ms=ns_to_ms(sched - self.arrival_ns),
            ttft_ms=ns_to_ms(first - self.arrival_ns),
            tpot_ms=tpot,
            e2e_ms=ns_to_ms(end - self.arrival_ns),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=n,
            process_peak_memory_bytes=self.process_peak_memory_bytes,
            preprocess_ms=self.prepared.preprocess_ms,
        )

    def to_output(self) -> GenerationOutput:
        """The finished output of this request."""
        return GenerationOutput(
            request_id=self.request_id,
            text=self.text,
            token_ids=list(self.output_ids),
            finish_reason=self.finish_reason or "abort",
            metrics=self.metrics(),
            error=self.error,
            logprobs=list(self.logprobs) if self.sampling.logprobs is not None else None,
        )
