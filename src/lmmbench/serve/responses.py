"""OpenAI response bodies and SSE chunks for chat completions and completions, plus ``metrics``.

Streaming follows OpenAI exactly: (chat) a role chunk, content chunks, a chunk with
``finish_reason``; with ``stream_options.include_usage`` a last chunk with empty ``choices`` and
``usage`` (``usage: null`` on the others); with ``continuous_usage_stats`` usage on every chunk;
then ``data: [DONE]``. The server-side ``metrics`` object rides on the last chunk before ``[DONE]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from lmmbench.engines.requests import GenerationOutput, TokenLogprob

__all__ = ["ResponseBuilder", "sse", "usage_of"]

Kind = Literal["chat", "completion"]


def sse(data: dict[str, Any] | str) -> str:
    """One server-sent event line pair."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n"


def usage_of(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The OpenAI ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _finish_reason(output: GenerationOutput) -> str:
    return "length" if output.finish_reason == "length" else "stop"


def _name(token_id: int, text: str, token_ids: bool) -> str:
    return f"token_id:{token_id}" if token_ids else text


def completion_logprobs(lps: list[TokenLogprob] | None, token_ids: bool = False) -> dict[str, Any] | None:
    """``choices[i].logprobs`` of a text completion as vLLM writes it: tokens, token_logprobs, top_logprobs (one
    ``{token: log-prob}`` per step, the chosen token included) and text_offset."""
    if lps is None:
        return None
    offsets, at = [], 0
    for t in lps:
        offsets.append(at)
        at += len(t.text)
    tops = [{_name(i, x, token_ids): v for i, x, v in t.top} | {_name(t.token_id, t.text, token_ids): t.logprob}
            for t in lps]  # fmt: skip
    return {"tokens": [_name(t.token_id, t.text, token_ids) for t in lps], "token_logprobs": [t.logprob for t in lps],
            "top_logprobs": tops, "text_offset": offsets}  # fmt: skip


def chat_logprobs(lps: list[TokenLogprob] | None, token_ids: bool = False) -> dict[str, Any] | None:
    """``choices[i].logprobs`` of a chat completion as OpenAI and vLLM write it: ``content``, one entry per token
    with ``token``, ``logprob``, ``bytes`` and ``top_logprobs``."""
    if lps is None:
        return None

    def entry(i: int, text: str, lp: float) -> dict[str, Any]:
        name = _name(i, text, token_ids)
        return {"token": name, "logprob": lp, "bytes": list(name.encode("utf-8"))}

    return {"content": [{**entry(t.token_id, t.text, t.logprob), "top_logprobs": [entry(*e) for e in t.top]}
                        for t in lps]}  # fmt: skip


@dataclass
class ResponseBuilder:
    """Builds the bodies of one request's response."""

    kind: Kind
    request_id: str
    model: str
    created: int
    include_usage: bool = False
    continuous_usage: bool = False
    token_ids: bool = False  # vLLM's return_tokens_as_token_ids: log-prob tokens as "token_id:N"
    _content_parts: tuple[str, str, str] | None = field(default=None, init=False, repr=False)

    @property
    def _object(self) -> str:
        if self.kind == "chat":
            return "chat.completion.chunk"
        return "text_completion"

    def _chunk(self, choice: dict[str, Any] | None, usage: dict[str, int] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.request_id,
            "object": self._object,
            "created": self.created,
            "model": self.model,
            "choices": [choice] if choice is not None else [],
        }
        if self.include_usage or self.continuous_usage or usage is not None:
            body["usage"] = usage
        return body

    def _choice(self, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text is not None:
                delta = {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

    def role_chunk(self, prompt_tokens: int) -> dict[str, Any]:
        """The first chat chunk (role, empty content)."""
        usage = usage_of(prompt_tokens, 0) if self.continuous_usage else None
        return self._chunk(self._choice(None, None, role=True), usage)

    def content_sse(self, text: str, prompt_tokens: int, completion_tokens: int) -> str:
        """The SSE line of a chunk carrying newly released text (its JSON template is built once)."""
        if self._content_parts is None:
            text_mark, usage_mark = "\u0000T", {"\u0000": 0}
            body = json.dumps(
                self._chunk(self._choice(text_mark, None), usage_mark if self.continuous_usage else None),
                separators=(",", ":"),
            )
            head, _, rest = body.partition(json.dumps(text_mark))
            mid, tail = rest, ""
            if self.continuous_usage:
                mid, _, tail = rest.partition(json.dumps(usage_mark, separators=(",", ":")))
            self._content_parts = (head, mid, tail)
        head, mid, tail = self._content_parts
        out = "data: " + head + json.dumps(text) + mid
        if self.continuous_usage:
            out += json.dumps(usage_of(prompt_tokens, completion_tokens), separators=(",", ":")) + tail
        return out + "\n\n"

    def final_chunks(self, output: GenerationOutput) -> list[dict[str, Any]]:
        """The finish chunk, and the usage chunk when asked for; ``metrics`` on the last one."""
        m = output.metrics
        usage = usage_of(m.prompt_tokens, m.completion_tokens)
        finish = self._chunk(
            self._choice("" if self.kind == "completion" else None, _finish_reason(output)),
            usage if self.continuous_usage else None,
        )
        chunks = [finish]
        if self.include_usage:
            chunks.append(self._chunk(None, usage))
        chunks[-1]["metrics"] = m.as_dict()
        return chunks

    def full(self, output: GenerationOutput) -> dict[str, Any]:
        """The non-streaming response body."""
        m, token_ids = output.metrics, self.token_ids
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": output.text},
                "logprobs": chat_logprobs(output.logprobs, token_ids),
                "finish_reason": _finish_reason(output),
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": output.text, "logprobs": completion_logprobs(output.logprobs, token_ids),
                      "finish_reason": _finish_reason(output)}
            obj = "text_completion"
        return {
            "id": self.request_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_of(m.prompt_tokens, m.completion_tokens),
            "metrics": m.as_dict(),
        }
