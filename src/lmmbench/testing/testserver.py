"""The shipped OpenAI-compatible test server: exactly timed streams, usage, and injected faults.

A raw asyncio protocol server (no web framework) so that it stays cheap next to the client on
the same small machine. Every chunk of a request is scheduled at an absolute time from its
arrival (``ttft_ms`` to the first content chunk, then ``tokens_per_chunk * itl_ms`` between
chunks), so delays never accumulate. Timers are woken ``timer_lead_us`` early to cancel the
event loop's ~1 ms timer rounding on average. ``GET /stats`` reports requests and injected
faults per kind, ``GET /received`` every POST's path, headers and body (``testing.request_log``);
several processes can share the port (``workers``, SO_REUSEPORT).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import deque
from typing import Any

from lmmbench.config.limits import limit_value
from lmmbench.config.perf.testserver import FAULT_KINDS, TestServerConfig
from lmmbench.loadgen.precise_timer import PreciseTimers
from lmmbench.testing.answer_key import answer_words, full_received
from lmmbench.testing.request_log import RequestLog
from lmmbench.testing.server_model import PrefixCacheModel, render_metrics
from lmmbench.testing.sglang_native_server import native_event_bytes, native_request, server_info

__all__ = ["TestServerState", "run_testserver", "serve"]

WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
]  # fmt: skip


class TestServerState:
    """Counters and settings shared by every connection of one server process."""

    __test__ = False

    def __init__(self, cfg: TestServerConfig, lead_s: float) -> None:
        self.cfg = cfg
        self.lead_s = lead_s
        self.requests = 0
        self.fault_acc = dict.fromkeys(cfg.faults, 0.0)
        self.fault_counts = dict.fromkeys(FAULT_KINDS, 0)
        self.counter = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.precise: PreciseTimers | None = None
        self.spin = cfg.timer == "spin"
        self.active = 0
        self.queued: deque[tuple[_ServerConn, str, str, bytes]] = deque()
        self.adaptive = cfg.timer == "adaptive"
        self.cache = PrefixCacheModel(cfg)
        self.profile_calls: list[str] = []  # start_profile / stop_profile, in order
        self.log = RequestLog()  # every POST's path, headers and body (GET /received)

    def call_at_pc(self, target_pc: float, cb: Any, *args: Any) -> asyncio.TimerHandle | None:
        """Call ``cb(*args)`` at ``perf_counter`` time ``target_pc`` (see ``timer``)."""
        assert self.loop is not None
        if self.precise is not None:
            self.precise.call_at_ns(round(target_pc * 1e9), cb, *args)
            return None
        delay = target_pc - time.perf_counter() - self.lead_s
        return self.loop.call_later(max(delay, 0.0), self._fire, target_pc, cb, args)

    def _fire(self, target_pc: float, cb: Any, args: tuple[Any, ...]) -> None:
        now = time.perf_counter()
        if self.spin:
            if now < target_pc:
                assert self.loop is not None
                self.loop.call_soon(self._fire, target_pc, cb, args)
                return
        elif self.adaptive:
            # track the loop's timer rounding so that chunks leave on target on average; clip the
            # error so that a process descheduled for a while does not drag the lead
            err = min(max(now - target_pc, -0.001), 0.001)
            self.lead_s = min(max(self.lead_s + 0.05 * err, 0.0), 0.002)
        cb(*args)

    def pick_fault(self) -> str:
        """Deterministic fault assignment: each kind fires exactly floor(n * rate) times in n requests."""
        for kind, rate in self.cfg.faults.items():
            self.fault_acc[kind] += rate
        for kind in self.cfg.faults:
            if self.fault_acc[kind] >= 1.0 - 1e-9:
                self.fault_acc[kind] -= 1.0
                self.fault_counts[kind] += 1
                return kind
        return ""


def _status_line(code: int) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
              500: "Internal Server Error"}.get(code, "Error")  # fmt: skip
    return f"HTTP/1.1 {code} {reason}\r\n".encode()


def _json_response(code: int, obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    return (
        _status_line(code)
        + b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


_MAX_HEAD_BYTES = 64 * 1024  # request line + headers


def _request_problem(req: dict[str, Any], chat: bool) -> str | None:
    """What is wrong with a completion request's fields (None when nothing): bad input is a 400."""
    for key in ("max_tokens", "max_completion_tokens"):
        v = req.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            return f"'{key}' must be a non-negative integer"
        if isinstance(v, int) and v > limit_value("output_tokens"):
            return f"'{key}' = {v} exceeds {limit_value('output_tokens')}"
    if not isinstance(req.get("stream_options") or {}, dict):
        return "'stream_options' must be an object"
    if chat:
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            return "'messages' must be a non-empty list of message objects"
    elif not isinstance(req.get("prompt", ""), (str, list)):
        return "'prompt' must be a string or a list"
    return None


def _error(code: int, message: str) -> bytes:
    return _json_response(code, {"error": {"message": message, "type": "invalid_request_error", "code": code}})


def _chunk(payload: bytes) -> bytes:
    """One HTTP chunk carrying one SSE event."""
    data = b"data: " + payload + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class _Stream:
    """The timeline of one streamed answer."""

    __slots__ = ("cached", "chat", "conn", "continuous", "fault", "handle", "include_usage", "n_out", "native",
                 "next_index", "prompt_tokens", "rid", "sent_tokens", "sglext", "t0", "words")  # fmt: skip

    def __init__(self, conn: _ServerConn, rid: str, chat: bool, n_out: int, prompt_tokens: int,
                 include_usage: bool, continuous: bool, fault: str, t0: float) -> None:  # fmt: skip
        self.conn, self.rid, self.chat, self.n_out = conn, rid, chat, n_out
        self.prompt_tokens, self.include_usage, self.continuous = prompt_tokens, include_usage, continuous
        self.fault, self.t0 = fault, t0
        self.next_index = 0
        self.sent_tokens = 0
        self.native = False
        self.cached = 0  # prompt tokens the prefix cache held
        self.sglext = False  # SGLang's OpenAI API asked for cached_tokens_details (return_cached_tokens_details)
        self.handle: asyncio.TimerHandle | None = None
        self.words = WORDS  # what it answers (the answer key's words: testing/answer_key.py)


class _ServerConn(asyncio.Protocol):
    def __init__(self, state: TestServerState) -> None:
        self.state = state
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.stream: _Stream | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.stream is not None:
            if self.stream.handle is not None:
                self.stream.handle.cancel()
            self._release()
        self.transport = None

    def _release(self) -> None:
        """The current stream ended: free its slot, start a queued request."""
        st = self.state
        if self.stream is not None:
            st.cache.active_tokens -= self.stream.prompt_tokens + self.stream.n_out
        self.stream = None
        st.active -= 1
        while st.queued:
            conn, method, path, body = st.queued.popleft()
            if conn.transport is not None:
                conn.handle(method, path, body)
                break

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close: the rest of the stream cannot be framed."""
        self.write(_error(status, message))
        self.buf.clear()
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                if len(self.buf) > _MAX_HEAD_BYTES:
                    self._refuse(431, "request headers too large")
                return
            head = bytes(self.buf[:i]).decode("latin-1")
            lines = head.split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip()) if value.strip().isdigit() else -1
            if length < 0:
                self._refuse(400, "bad Content-Length")
                return
            if length > limit_value("body_bytes"):
                self._refuse(413, f"request body of {length} bytes exceeds the limit of {limit_value('body_bytes')}")
                return
            if len(self.buf) < i + 4 + length:
                return
            body = bytes(self.buf[i + 4 : i + 4 + length])
            del self.buf[: i + 4 + length]
            parts = lines[0].split(" ")
            if len(parts) < 2:
                self.write(_error(400, "bad request line"))
                continue
            if parts[0] == "POST":
                self.state.log.add(parts[1], lines[1:], body)
            self.handle(parts[0], parts[1], body)

    # request handling --------------------------------------------------------------------
    def handle(self, method: str, path: str, body: bytes) -> None:
        """Answer one HTTP request: a GET route, a control POST, or a completion (whole or streamed)."""
        path = path.split("?", 1)[0]
        if method == "GET":
            self._get(path)
            return
        if method == "POST" and self._control(path):
            return
        parsed = self._completion_request(method, path, body)
        if parsed is not None:
            req, chat, native = parsed
            self._serve(req, chat, native, (self, method, path, body))

    def _get(self, path: str) -> None:
        """The GET routes: models, SGLang's server info, health, Prometheus metrics, the test's stats."""
        cfg = self.state.cfg
        if path.endswith("/models"):
            self.write(_json_response(200, {"object": "list", "data": [
                {"id": cfg.model, "object": "model", "owned_by": "lmmbench"}]}))  # fmt: skip
        elif path == "/server_info":  # SGLang's: what its bench client reads the spec-decode accept length from
            self.write(_json_response(200, server_info(cfg)))
        elif path == "/received":  # what the server was sent, for tests of a flag's effect on the wire
            self.write(_json_response(200, self.state.log.page()))
        elif path == "/received_full":  # the same with the prompts, to compare request bodies whole
            self.write(_json_response(200, full_received(self.state.log)))
        elif path in ("/health", "/v1/health"):
            self.write(_json_response(200, {"status": "ok"}))
        elif path == "/metrics" and cfg.metrics_names != "none":
            page = render_metrics(cfg, self.state.cache, self.state.active, len(self.state.queued))
            self.write(_status_line(200) + b"Content-Type: text/plain; version=0.0.4\r\nContent-Length: "
                       + str(len(page)).encode() + b"\r\n\r\n" + page)  # fmt: skip
        elif path == "/stats":
            st = self.state
            self.write(_json_response(200, {"requests": st.requests, "faults": st.fault_counts,
                                            "profile_calls": st.profile_calls,
                                            "cpu_s": time.process_time(),
                                            "pid": os.getpid()}))  # fmt: skip
        else:
            self.write(_error(404, f"no route {path}"))

    def _control(self, path: str) -> bool:
        """vLLM's and SGLang's control POSTs (prefix-cache reset, profiler start / stop); False for any other."""
        if path in ("/reset_prefix_cache", "/flush_cache"):  # vLLM's and SGLang's endpoints of that name
            self.state.cache.blocks.clear()
        elif path in ("/start_profile", "/stop_profile"):  # vLLM's profiler endpoints
            self.state.profile_calls.append(path.strip("/"))
        else:
            return False
        self.write(_json_response(200, {"status": "ok"}))
        return True

    def _completion_request(self, method: str, path: str, body: bytes) -> tuple[dict[str, Any], bool, bool] | None:
        """The completion request's body, whether chat, whether SGLang-native; None once an error is written."""
        cfg = self.state.cfg
        chat = path.endswith("/chat/completions")
        native = path == "/generate"  # SGLang's native API: cumulative text + meta_info per event
        if method != "POST" or not (chat or native or path.endswith("/completions")):
            self.write(_error(404, f"no route {method} {path}"))
            return None
        try:
            req = json.loads(body)
            assert isinstance(req, dict)
        except (ValueError, AssertionError, RecursionError):
            self.write(_error(400, "body is not a JSON object"))
            return None
        if native:
            req = native_request(req, cfg.model)
        problem = _request_problem(req, chat)
        if problem is None and not cfg.accept_any_model and req.get("model") != cfg.model:
            self.write(_error(404, f"The model `{req.get('model')}` does not exist."))
            return None
        opts = req.get("stream_options") or {}
        if problem is None and cfg.reject_continuous_usage and opts.get("continuous_usage_stats"):
            problem = "unknown field stream_options.continuous_usage_stats"
        if problem is None and cfg.reject_ignore_eos and ("ignore_eos" in req or "min_tokens" in req):
            problem = "Unrecognized request arguments supplied: ignore_eos, min_tokens"
        if problem is not None:
            self.write(_error(400, problem))
            return None
        return req, chat, native

    def _serve(self, req: dict[str, Any], chat: bool, native: bool, raw: tuple[_ServerConn, str, str, bytes]) -> None:
        """Count the request, inject its fault, then answer it whole after its delay or open its stream."""
        cfg = self.state.cfg
        st = self.state
        st.requests += 1
        st.counter += 1
        fault = st.pick_fault()
        if fault in ("http_400", "http_429", "http_500"):
            self.write(_error(int(fault[5:]), f"injected {fault}"))
            return
        if cfg.logprobs_reference is not None and req.get("logprobs") and not chat and not native:
            from lmmbench.testing.logprob_replay import logprob_answer

            self.write(_json_response(*logprob_answer(cfg, req, f"cmpl-{os.getpid()}-{st.counter}")))
            return
        n_out = int(req.get("max_tokens") or req.get("max_completion_tokens") or cfg.output_tokens)
        n_out = max(n_out, 1)
        if chat:
            msgs = req.get("messages") or []
            text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
        else:
            text = str(req.get("prompt", ""))
        words = text.split()
        rid = f"cmpl-{os.getpid()}-{st.counter}"
        t0 = time.perf_counter()
        if not req.get("stream"):
            ttft, cached = self._ttft_s(words)
            answer = (rid, chat, n_out, len(words), native, cached, bool(req.get("return_cached_tokens_details")))
            st.call_at_pc(t0 + ttft + (n_out - 1) * cfg.itl_ms / 1e3, self._answer_whole, *answer)
            return
        if cfg.max_streams and st.active >= cfg.max_streams:
            st.queued.append(raw)  # emulate a saturated server: wait for a slot
            st.requests -= 1
            st.counter -= 1
            if fault:
                st.fault_counts[fault] -= 1
                st.fault_acc[fault] += 1.0
            return
        self._open_stream(req, chat, native, rid, n_out, words, fault, t0)

    def _open_stream(self, req: dict[str, Any], chat: bool, native: bool, rid: str, n_out: int,
                     words: list[str], fault: str, t0: float) -> None:  # fmt: skip
        """Write the stream's head (and role chunk), then schedule its first token after the TTFT."""
        cfg = self.state.cfg
        st = self.state
        opts = req.get("stream_options") or {}
        prompt_tokens = len(words)
        st.active += 1
        s = _Stream(self, rid, chat, n_out, prompt_tokens, bool(opts.get("include_usage")) and cfg.usage,
                    bool(opts.get("continuous_usage_stats")) and cfg.continuous_usage, fault, t0)  # fmt: skip
        s.native = native
        answer = answer_words(cfg.answers, cfg.correct_below_inflight, " ".join(words), st.active)
        if answer:
            s.words, s.n_out = answer, min(n_out, len(answer))
        s.sglext = bool(req.get("return_cached_tokens_details"))
        self.stream = s
        st.cache.active_tokens += prompt_tokens + n_out
        head = _status_line(200) + (
            b"Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        if cfg.role_chunk and chat:
            head += _chunk(self._payload(s, {"role": "assistant", "content": ""}, None, 0))
        self.write(head)
        if fault == "stall":
            return
        ttft, s.cached = self._ttft_s(words)
        s.t0 = t0 + ttft - cfg.ttft_ms / 1e3  # later chunks keep their spacing after the first
        s.handle = st.call_at_pc(s.t0 + cfg.ttft_ms / 1e3, self._emit, s)

    def _ttft_s(self, words: list[str]) -> tuple[float, int]:
        """TTFT of a prompt (ttft_ms plus the prefill of its tokens the prefix cache does not hold), cached tokens."""
        cfg = self.state.cfg
        cached = self.state.cache.lookup_and_fill(words)
        return (cfg.ttft_ms + (len(words) - cached) * cfg.prefill_ms_per_token) / 1e3, cached

    def _payload(self, s: _Stream, delta: dict[str, Any], finish: str | None, cum_tokens: int) -> bytes:
        # rendered by hand (same JSON as json.dumps of the chunk object): this runs for every chunk
        cfg = self.state.cfg
        if s.native:
            return native_event_bytes(s.rid, s.prompt_tokens, cum_tokens, finish, WORDS, s.cached)
        kind = "chat.completion.chunk" if s.chat else "text_completion"
        head = f'{{"id":"{s.rid}","object":"{kind}","created":0,"model":{json.dumps(cfg.model)},"choices":[{{"index":0,'
        fin = "null" if finish is None else f'"{finish}"'
        if s.chat:
            body = f'"delta":{json.dumps(delta, separators=(",", ":"))},"finish_reason":{fin}}}]'
        else:
            body = f'"text":{json.dumps(delta.get("content", ""))},"finish_reason":{fin}}}]'
        tail = "}"
        if s.continuous:
            tail = (f',"usage":{{"prompt_tokens":{s.prompt_tokens},"completion_tokens":{cum_tokens},'
                    f'"total_tokens":{s.prompt_tokens + cum_tokens}}}}}')  # fmt: skip
        return (head + body + tail).encode()

    def _emit(self, s: _Stream) -> None:
        if self.stream is not s or self.transport is None:
            return
        cfg = self.state.cfg
        k = min(cfg.tokens_per_chunk, s.n_out - s.sent_tokens)
        first = s.sent_tokens
        s.sent_tokens += k
        self.state.cache.generated_tokens += k  # /metrics' spec-decode counters follow it
        words = "".join(" " + s.words[(first + j) % len(s.words)] for j in range(k))
        n_reason = max(0, min(cfg.reasoning_tokens, s.sent_tokens) - first)
        delta: dict[str, Any] = {}
        if n_reason:
            split = len("".join(" " + s.words[(first + j) % len(s.words)] for j in range(n_reason)))
            delta["reasoning_content"] = words[:split]
            if words[split:]:
                delta["content"] = words[split:]
        else:
            delta["content"] = words
        s.next_index += 1
        if s.fault == "malformed" and s.next_index == 2:
            self.write(_chunk(b'{"choices": [ {"delta": '))
        elif s.fault == "error_event" and s.next_index == 2:
            self.write(_chunk(b'{"error": {"message": "injected error event", "code": 500}}'))
            self._end(s, send_usage=False)
            return
        else:
            self.write(_chunk(self._payload(s, delta, None, s.sent_tokens)))
        if s.fault == "disconnect" and s.next_index >= 2:
            s.handle = None
            self._release()
            if self.transport is not None:
                self.transport.abort()
            return
        if s.sent_tokens >= s.n_out:
            self._end(s, send_usage=True)
            return
        when = s.t0 + (cfg.ttft_ms + s.sent_tokens * cfg.itl_ms) / 1e3
        s.handle = self.state.call_at_pc(when, self._emit, s)

    def _end(self, s: _Stream, send_usage: bool) -> None:
        cfg = self.state.cfg
        out = _chunk(self._payload(s, {}, "length", s.sent_tokens))
        if send_usage and s.include_usage:
            usage = {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.sent_tokens,
                     "total_tokens": s.prompt_tokens + s.sent_tokens}  # fmt: skip
            obj: dict[str, Any] = {"id": s.rid, "object": "chat.completion.chunk" if s.chat else "text_completion",
                   "created": 0, "model": cfg.model, "choices": [], "usage": usage}  # fmt: skip
            if s.sglext:  # SGLang's OpenAI API: where its cached prompt tokens come from
                obj["sglext"] = {"cached_tokens_details": {"device": s.cached, "host": 0}}
            out += _chunk(json.dumps(obj, separators=(",", ":")).encode())
        if cfg.send_done:
            out += _chunk(b"[DONE]")
        self.write(out + b"0\r\n\r\n")
        s.handle = None
        self._release()

    def _answer_whole(self, rid: str, chat: bool, n_out: int, prompt_tokens: int, native: bool, cached: int,
                      sglext: bool) -> None:  # fmt: skip
        """The whole (non-streamed) answer, in SGLang's native shape on /generate, else OpenAI's."""
        cfg = self.state.cfg
        if native:
            page = native_event_bytes(rid, prompt_tokens, n_out, "length", WORDS, cached)
            self.write(_status_line(200) + b"Content-Type: application/json\r\nContent-Length: "
                       + str(len(page)).encode() + b"\r\n\r\n" + page)  # fmt: skip
            return
        text = "".join(" " + WORDS[j % len(WORDS)] for j in range(n_out))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n_out, "total_tokens": prompt_tokens + n_out}
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "length"}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        whole: dict[str, Any] = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                                 "model": cfg.model, "choices": [choice], "usage": usage}  # fmt: skip
        if sglext:
            whole["sglext"] = {"cached_tokens_details": {"device": cached, "host": 0}}
        self.write(_json_response(200, whole))


def _default_lead_s(loop: asyncio.AbstractEventLoop, cfg: TestServerConfig) -> float:
    if cfg.timer_lead_us >= 0:
        return cfg.timer_lead_us / 1e6
    uv = "uvloop" in type(loop).__module__
    if cfg.timer == "spin":
        return 700e-6 if uv else 1200e-6
    return 130e-6 if uv else 550e-6


async def serve(cfg: TestServerConfig, ready: Any = None) -> None:
    """Serve until cancelled (or SIGINT/SIGTERM); ``ready`` (an Event-like) is set once listening."""
    loop = asyncio.get_running_loop()
    state = TestServerState(cfg, _default_lead_s(loop, cfg))
    state.loop = loop
    if cfg.timer == "timerfd":
        state.precise = PreciseTimers.create(loop)
        if state.precise is None:
            state.adaptive = True
    server = await loop.create_server(
        lambda: _ServerConn(state), cfg.host, cfg.port, reuse_port=cfg.workers > 1, backlog=4096
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        server.close()


def _run_one(cfg: TestServerConfig, ready: Any = None) -> None:
    use_uvloop = cfg.loop == "uvloop"
    if cfg.loop == "auto":
        try:
            import uvloop

            use_uvloop = True
        except ImportError:
            use_uvloop = False
    if use_uvloop:
        import uvloop

        uvloop.run(serve(cfg, ready))
    else:
        asyncio.run(serve(cfg, ready))


def _worker_main(cfg: TestServerConfig) -> None:
    """A worker process: it dies with its parent (Linux PR_SET_PDEATHSIG), so no worker outlives it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            return
    _run_one(cfg)


def run_testserver(cfg: TestServerConfig) -> None:
    """Run the server in the foreground (``workers`` processes when more than one).

    A taken port is a ``UserError``; workers end with the parent (SIGINT, SIGTERM or a kill)."""
    from lmmbench.core.net import ensure_port_free

    ensure_port_free(cfg.host, cfg.port)
    if cfg.workers == 1:
        _run_one(cfg)
        return
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker_main, args=(cfg,), daemon=True) for _ in range(cfg.workers)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
