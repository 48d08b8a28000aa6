"""OpenAI request bodies (chat completions, completions) and their mapping to engine requests.

Bodies are validated with pydantic; anything invalid becomes an ``ApiError`` with an
OpenAI-style error object. Unknown fields are ignored (clients send extras); fields that would
change the answer and are not supported (``n > 1``, penalties, tools, JSON mode, ``echo``, logprobs with ``stream``) are
refused with 400 rather than silently ignored. ``logprobs`` / ``top_logprobs`` are answered as vLLM answers
them (without ``stream``). No field is ever evaluated as code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lmmbench.core.errors import validation_detail
from lmmbench.engines.requests import GenerationRequest, SamplingParams

__all__ = ["ApiError", "ChatCompletionBody", "CompletionBody", "StreamOptions", "error_body", "parse_body"]


class ApiError(Exception):
    """An error answered with ``status`` and an OpenAI-style error object."""

    def __init__(
        self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
        code: str | None = None, headers: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON error object."""
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` as OpenAI answers it."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class StreamOptions(BaseModel):
    """``stream_options``: a final usage chunk, and usage in every chunk."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _SamplingBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=-1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool | int | None = None
    user: str | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, v: int) -> int:
        if v != 1:
            raise ValueError("only n=1 is supported")
        return v

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, v: float) -> float:
        if v != 0.0:
            raise ValueError("penalties are not supported; leave them at 0")
        return v

    return_tokens_as_token_ids: bool = False  # vLLM's: log-prob tokens as "token_id:N"

    def logprob_count(self) -> int | None:
        """How many top log-probabilities per token (0: the chosen one's only); None when not asked."""
        return None

    def _check_logprobs(self) -> None:
        if self.logprob_count() is not None and self.stream:
            raise ApiError(400, "logprobs with stream are not supported; ask without stream", param="logprobs")

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 16 or any(not s or len(s) > 256 for s in stops):
            raise ValueError("at most 16 non-empty stop strings of at most 256 characters")
        return v

    def sampling(self, default_max_tokens: int, max_tokens_field: str = "max_tokens") -> SamplingParams:
        """Engine sampling parameters of this body."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        max_tokens = getattr(self, max_tokens_field, None) or self.max_tokens or default_max_tokens
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            seed=self.seed,
            stop=stops,
            stop_token_ids=list(self.stop_token_ids or []),
            ignore_eos=self.ignore_eos,
            min_tokens=self.min_tokens,
            logprobs=self.logprob_count(),
        )
        self._check_logprobs()
        try:
            params.validate()
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return params


class ChatCompletionBody(_SamplingBody):
    """``POST /v1/chat/completions``."""

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Any] | None = None
    response_format: dict[str, Any] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    def logprob_count(self) -> int | None:
        """Chat: ``logprobs: true`` asks for them, ``top_logprobs`` how many top ones."""
        if self.logprobs is not None and not isinstance(self.logprobs, bool):
            raise ApiError(400, "logprobs: a boolean for chat completions (top_logprobs gives the count)",
                           param="logprobs")  # fmt: skip
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None

    @field_validator("messages")
    @classmethod
    def _roles(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, msg in enumerate(v):
            if msg.get("role") not in ("system", "user", "assistant", "developer"):
                raise ValueError(f"messages[{i}].role must be system, user, assistant or developer")
            content = msg.get("content")
            if not isinstance(content, (str, list)) and content is not None:
                raise ValueError(f"messages[{i}].content must be a string or a list of parts")
        return v

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, v: list[Any] | None) -> list[Any] | None:
        if v:
            raise ValueError("tools are not supported")
        return v

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v and v.get("type", "text") != "text":
            raise ValueError("only response_format type 'text' is supported")
        return v

    def to_request(self, request_id: str, arrival_ns: int, default_max_tokens: int) -> GenerationRequest:
        """The engine request of this body."""
        messages = [{**m, "role": "system" if m.get("role") == "developer" else m.get("role")} for m in self.messages]
        return GenerationRequest(
            messages=messages,
            sampling=self.sampling(default_max_tokens, "max_completion_tokens"),
            request_id=request_id,
            arrival_ns=arrival_ns,
        )


class CompletionBody(_SamplingBody):
    """``POST /v1/completions`` (one prompt: a string or token ids)."""

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: Literal[False] = False
    suffix: None = None

    def logprob_count(self) -> int | None:
        """Completions: ``logprobs: N`` (0..20) top log-probabilities per token."""
        if self.logprobs is None or self.logprobs is False:
            return None
        if isinstance(self.logprobs, bool) or not 0 <= self.logprobs <= 20:
            raise ApiError(400, "logprobs: an integer from 0 to 20 for completions", param="logprobs")
        return int(self.logprobs)

    def to_request(self, request_id: str, arrival_ns: int, default_max_tokens: int) -> GenerationRequest:
        """The engine request of this body."""
        prompt: Any = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise ApiError(400, "only one prompt per request is supported", param="prompt")
            prompt = prompt[0]
        sampling = self.sampling(default_max_tokens)
        if isinstance(prompt, str):
            return GenerationRequest(prompt=prompt, sampling=sampling, request_id=request_id, arrival_ns=arrival_ns)
        ids = [int(t) for t in prompt]
        if not ids:
            raise ApiError(400, "prompt is empty", param="prompt")
        return GenerationRequest(prompt_token_ids=ids, sampling=sampling, request_id=request_id, arrival_ns=arrival_ns)


def parse_body(model: type[_SamplingBody], data: Any) -> Any:
    """Validate a decoded JSON body; errors become a 400 ``ApiError`` naming the field."""
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        loc, msg, _ = validation_detail(exc)
        raise ApiError(400, f"{loc}: {msg}" if loc else msg, param=loc or None) from None
