"""What the measuring proxy (``lmmbench proxy``) does with one upstream answer: time it, relay it, add ``metrics``.

``Measure`` holds one request's instants (``perf_counter_ns``) and the upstream's ``usage`` and turns them into
the ``metrics`` object lmmbench's own server returns (``engines.requests.RequestMetrics.as_dict``: the same keys,
but memory, which is the device's here; what the proxy cannot see, the engine's queue and preprocessing, is null):

- ``ttft_ms``: from the proxy receiving the request to the first upstream chunk carrying generated text
  (content or reasoning; a role-only or empty chunk is not a token);
- ``e2e_ms`` (latency): from the proxy receiving the request to the upstream's last event;
- ``tpot_ms``: (e2e - ttft) / (completion_tokens - 1), null for a one-token answer, without ``usage``, or for
  several choices (``n`` > 1: ``usage`` counts the tokens of all of them);
- ``prompt_tokens`` / ``completion_tokens``: the upstream's ``usage``, null when it sends none;
- ``device_peak_memory_bytes``: from ``serve.proxy.memory`` (NVML: used memory of the whole device, every process
  on it; lmmbench's server reports its own process's memory under another name, ``process_peak_memory_bytes``),
  null without it.

``StreamRelay`` forwards each upstream SSE event as it arrives, except the events that end a stream (a chunk
with ``finish_reason``, the usage chunk): those are held until the stream ends, so that ``metrics`` rides on
the last chunk before ``[DONE]``, as lmmbench's server sends it. ``WholeAnswer`` rebuilds one non-streamed
response body from a streamed upstream answer (the proxy streams upstream to see the first token).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Measure", "StreamRelay", "WholeAnswer", "has_text"]

_MS = 1e6


def has_text(choice: dict[str, Any]) -> bool:
    """Whether one streamed choice carries generated text (content, reasoning or completion text)."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return any(bool(delta.get(k)) for k in ("content", "reasoning_content", "reasoning"))
    return bool(choice.get("text"))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class Measure:
    """One request's instants and usage as the proxy saw them."""

    arrival_ns: int
    first_token_ns: int = 0
    end_ns: int = 0
    usage: dict[str, Any] | None = None
    device_peak_memory_bytes: int | None = None
    token_seen: bool = True  # False: an answer forwarded whole, whose first token the proxy cannot see
    several_choices: bool = False  # n > 1: usage counts every choice's tokens, so TPOT is not one stream's

    def see(self, t_ns: int, obj: dict[str, Any]) -> None:
        """Account one upstream event (a parsed chunk) that arrived at ``t_ns``."""
        self.end_ns = t_ns
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        if any(isinstance(c, dict) and c.get("index", 0) != 0 for c in choices):
            self.several_choices = True
        if not self.first_token_ns and any(isinstance(c, dict) and has_text(c) for c in choices):
            self.first_token_ns = t_ns

    def metrics(self) -> dict[str, float | int | None]:
        """The ``metrics`` object (keys of lmmbench's server, memory the device's; null where unmeasured)."""
        e2e = (self.end_ns - self.arrival_ns) / _MS if self.end_ns else None
        ttft = (self.first_token_ns - self.arrival_ns) / _MS if self.first_token_ns and self.token_seen else None
        usage = self.usage or {}
        completion = _int_or_none(usage.get("completion_tokens"))
        tpot = None
        if ttft is not None and e2e is not None and completion is not None and completion > 1 \
                and not self.several_choices:
            tpot = (e2e - ttft) / (completion - 1)
        return {
            "queue_ms": None,
            "ttft_ms": None if ttft is None else round(ttft, 3),
            "tpot_ms": None if tpot is None else round(tpot, 3),
            "e2e_ms": None if e2e is None else round(e2e, 3),
            "prompt_tokens": _int_or_none(usage.get("prompt_tokens")),
            "completion_tokens": completion,
            "device_peak_memory_bytes": self.device_peak_memory_bytes,
            "preprocess_ms": None,
        }


def _event(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


@dataclass
class StreamRelay:
    """Decides, event by event, what a streamed answer sends to the client now and what it holds to the end.

    ``drop_usage``: the client did not ask for ``include_usage`` (the proxy asked upstream for it, to count
    output tokens): the usage-only chunk is read, not forwarded."""

    measure: Measure
    drop_usage: bool = False
    held: list[dict[str, Any]] = field(default_factory=list)
    last: dict[str, Any] | None = None
    saw_done: bool = False

    def feed(self, t_ns: int, payload: bytes) -> bytes:
        """The bytes to send now for one upstream event's ``data`` payload (possibly none)."""
        if payload == b"[DONE]":
            self.saw_done = True
            self.measure.end_ns = t_ns
            return b""
        try:
            obj = json.loads(payload)
        except ValueError:
            return self._flush_held() + _event(payload)  # not JSON: the client's parser decides
        if not isinstance(obj, dict):
            return self._flush_held() + _event(payload)
        self.measure.see(t_ns, obj)
        choices = obj.get("choices")
        if obj.get("error") is not None or not isinstance(choices, list):
            return self._flush_held() + _event(payload)
        self.last = obj
        if not choices:  # the usage chunk
            if not self.drop_usage:
                self.held.append(obj)
            return b""
        if any(isinstance(c, dict) and c.get("finish_reason") for c in choices):
            self.held.append(obj)
            return b""
        return self._flush_held() + _event(payload)

    def _flush_held(self) -> bytes:
        out = b"".join(_event(json.dumps(o, separators=(",", ":")).encode()) for o in self.held)
        self.held = []
        return out

    def finish(self, metrics: dict[str, Any]) -> bytes:
        """The held events with ``metrics`` on the last one (a chunk of its own when none is held), then
        ``[DONE]`` when the upstream sent it."""
        if not self.held:
            last = self.last or {}
            self.held.append({k: last[k] for k in ("id", "object", "created", "model") if k in last} | {"choices": []})
        self.held[-1]["metrics"] = metrics
        return self._flush_held() + (_event(b"[DONE]") if self.saw_done else b"")


def _merge_tool_calls(into: list[dict[str, Any]], deltas: list[Any]) -> None:
    for d in deltas:
        if not isinstance(d, dict):
            continue
        idx = d.get("index", len(into))
        while len(into) <= idx:
            into.append({"function": {"name": "", "arguments": ""}})
        call = into[idx]
        for key in ("id", "type"):
            if d.get(key):
                call[key] = d[key]
        fn = d.get("function") or {}
        for key in ("name", "arguments"):
            if fn.get(key):
                call["function"][key] += fn[key]


def _merge_logprobs(into: dict[str, Any], lp: Any) -> None:
    if not isinstance(lp, dict):
        return
    for key, value in lp.items():
        if isinstance(value, list):
            into.setdefault(key, []).extend(value)


@dataclass
class _Choice:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    logprobs: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None


@dataclass
class WholeAnswer:
    """Rebuilds the non-streamed body of a chat or text completion from the upstream's chunks."""

    chat: bool
    choices: dict[int, _Choice] = field(default_factory=dict)
    top: dict[str, Any] = field(default_factory=dict)

    def feed(self, obj: dict[str, Any]) -> None:
        """Add one parsed chunk."""
        self.top.update({k: v for k, v in obj.items() if k not in ("choices", "object", "usage", "metrics")})
        for ch in obj.get("choices") or []:
            if not isinstance(ch, dict):
                continue
            c = self.choices.setdefault(int(ch.get("index") or 0), _Choice())
            delta = ch.get("delta") if self.chat else ch
            if isinstance(delta, dict):
                text = delta.get("content") if self.chat else delta.get("text")
                if isinstance(text, str):
                    c.text.append(text)
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                if isinstance(reasoning, str):
                    c.reasoning.append(reasoning)
                if isinstance(delta.get("tool_calls"), list):
                    _merge_tool_calls(c.tool_calls, delta["tool_calls"])
            _merge_logprobs(c.logprobs, ch.get("logprobs"))
            if ch.get("finish_reason"):
                c.finish_reason = ch["finish_reason"]

    def body(self, usage: dict[str, Any] | None, metrics: dict[str, Any]) -> dict[str, Any]:
        """The response body, ``usage`` and ``metrics`` included."""
        out: dict[str, Any] = {**self.top, "object": "chat.completion" if self.chat else "text_completion"}
        out["choices"] = [self._choice(i, c) for i, c in sorted(self.choices.items())]
        if usage is not None:
            out["usage"] = usage
        out["metrics"] = metrics
        return out

    def _choice(self, index: int, c: _Choice) -> dict[str, Any]:
        lp = c.logprobs or None
        if not self.chat:
            return {"index": index, "text": "".join(c.text), "logprobs": lp, "finish_reason": c.finish_reason}
        message: dict[str, Any] = {"role": "assistant", "content": "".join(c.text) if c.text or not c.tool_calls
                                   else None}  # fmt: skip
        if c.reasoning:
            message["reasoning_content"] = "".join(c.reasoning)
        if c.tool_calls:
            message["tool_calls"] = c.tool_calls
        return {"index": index, "message": message, "logprobs": lp, "finish_reason": c.finish_reason}
