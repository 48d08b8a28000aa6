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

from lmmbench.config.limits import limit_value

__all__ = ["AnswerError", "Measure", "StreamRelay", "WholeAnswer", "has_text", "parse_event"]

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


def parse_event(payload: bytes) -> Any:
    """One event's JSON value, or None when it is not JSON (or nested past what the parser can read)."""
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        return None


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
        return self.feed_parsed(t_ns, payload, parse_event(payload))

    def feed_parsed(self, t_ns: int, payload: bytes, obj: Any) -> bytes:
        """``feed`` of an event already parsed (``obj``: None when not JSON), e.g. off the event loop."""
        if not isinstance(obj, dict):  # not a JSON object: the client's parser decides
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


class AnswerError(ValueError):
    """An upstream answer the proxy cannot rebuild: the message names the part that was wrong."""


def _index(value: Any, where: str, bound: int) -> int:
    """A list index of the upstream's answer, checked: a whole number within ``answer_index``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AnswerError(f"{where}: expected a whole number >= 0, got {value!r:.80}")
    if value > bound:
        raise AnswerError(f"{where}: {value} exceeds the limit answer_index={bound} (raise it with "
                          "LMMBENCH_LIMIT_ANSWER_INDEX=N)")
    return value


def _merge_tool_calls(into: list[dict[str, Any]], deltas: list[Any], where: str, bound: int) -> None:
    for j, d in enumerate(deltas):
        if not isinstance(d, dict):
            raise AnswerError(f"{where}.tool_calls[{j}]: expected an object, got {d!r:.80}")
        idx = _index(d.get("index", len(into)), f"{where}.tool_calls[{j}].index", bound)
        while len(into) <= idx:
            into.append({"function": {"name": "", "arguments": ""}})
        call = into[idx]
        for key in ("id", "type"):
            if d.get(key):
                call[key] = d[key]
        fn = d.get("function") or {}
        if not isinstance(fn, dict):
            raise AnswerError(f"{where}.tool_calls[{j}].function: expected an object, got {fn!r:.80}")
        for key in ("name", "arguments"):
            part = fn.get(key)
            if part is None or part == "":
                continue
            if not isinstance(part, str):
                raise AnswerError(f"{where}.tool_calls[{j}].function.{key}: expected a string, got {part!r:.80}")
            call["function"][key] += part


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

    def feed(self, obj: dict[str, Any], event: int = 0) -> None:
        """Add one parsed chunk (the ``event``-th of the stream); ``AnswerError`` naming a part that is wrong."""
        self.top.update({k: v for k, v in obj.items() if k not in ("choices", "object", "usage", "metrics")})
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise AnswerError(f"event {event}: choices: expected a list, got {choices!r:.80}")
        bound = limit_value("answer_index")
        for k, ch in enumerate(choices):
            where = f"event {event}: choices[{k}]"
            if not isinstance(ch, dict):
                raise AnswerError(f"{where}: expected an object, got {ch!r:.80}")
            c = self.choices.setdefault(_index(ch.get("index") or 0, f"{where}.index", bound), _Choice())
            delta = ch.get("delta") if self.chat else ch
            if isinstance(delta, dict):
                self._feed_delta(c, delta, f"{where}.delta" if self.chat else where, bound)
            _merge_logprobs(c.logprobs, ch.get("logprobs"))
            if ch.get("finish_reason"):
                c.finish_reason = ch["finish_reason"]

    def _feed_delta(self, c: _Choice, delta: dict[str, Any], where: str, bound: int) -> None:
        text = delta.get("content") if self.chat else delta.get("text")
        if isinstance(text, str):
            c.text.append(text)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str):
            c.reasoning.append(reasoning)
        calls = delta.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise AnswerError(f"{where}.tool_calls: expected a list, got {calls!r:.80}")
        if calls:
            _merge_tool_calls(c.tool_calls, calls, where, bound)

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
