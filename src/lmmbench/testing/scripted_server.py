"""An OpenAI-compatible chat / completions server that answers from a script and records what it was sent.

For accuracy tests and the lmms-eval cross-check: each rule is (text needle, media SHA-256 or None,
answer); a request gets the answer of the longest needle found in its text whose media hash (if given)
is among the request's media, else ``default``. Every request is recorded: its text parts, the SHA-256 of
each image / audio payload (decoded from its data URI or base64), the roles of its messages and its generation
settings (``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``), with its path and whole body. A request with
``"stream": true`` is answered as server-sent events (one word per chunk, usage when ``stream_options`` asks). Run
in a thread (``ScriptedServer``) or as
``python -m lmmbench.testing.scripted_server --port N --rules R.json --record F``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["ScriptedServer", "parse_chat_request"]

Rule = tuple[str, str | None, str]


def _sha_of_data(value: str) -> str:
    data = value.split(",", 1)[1] if value.startswith("data:") else value
    return hashlib.sha256(base64.b64decode(data)).hexdigest()


def parse_chat_request(body: dict[str, Any]) -> dict[str, Any]:
    """The recorded view of a chat request: texts, media (kind, SHA-256) in order, max_tokens."""
    texts: list[str] = []
    media: list[dict[str, str]] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        parts: list[dict[str, Any]] = [{"type": "text", "text": content}] if isinstance(content, str) else []
        parts = parts or list(content or [])
        for part in parts:
            kind = part.get("type")
            if kind == "text":
                texts.append(str(part.get("text", "")))
            elif kind == "image_url":
                media.append({"kind": "image", "sha256": _sha_of_data(str(part["image_url"]["url"]))})
            elif kind == "input_audio":
                media.append({"kind": "audio", "sha256": _sha_of_data(str(part["input_audio"]["data"]))})
            else:
                media.append({"kind": str(kind), "sha256": hashlib.sha256(json.dumps(part, default=str)
                                                                          .encode()).hexdigest()})  # fmt: skip
    layout = [("text" if p.get("type") == "text" else "media") for m in body.get("messages") or []
              for p in (m.get("content") if isinstance(m.get("content"), list) else [{"type": "text"}])]  # fmt: skip
    return {"texts": texts, "media": media, "layout": layout, "max_tokens": body.get("max_tokens"),
            "temperature": body.get("temperature"), "top_p": body.get("top_p"), "seed": body.get("seed"),
            "stop": body.get("stop"), "roles": [str(m.get("role")) for m in body.get("messages") or []]}  # fmt: skip


def _completion_view(body: dict[str, Any]) -> dict[str, Any]:
    """The recorded view of a completions request (its prompt as the one text)."""
    prompt = body.get("prompt")
    return {"texts": [prompt] if isinstance(prompt, str) else [str(p) for p in prompt or []], "media": [],
            "layout": ["text"], "max_tokens": body.get("max_tokens"), "temperature": body.get("temperature"),
            "top_p": body.get("top_p"), "seed": body.get("seed"), "stop": body.get("stop"), "roles": []}  # fmt: skip


class ScriptedServer:
    """The server, on 127.0.0.1 (port chosen at start), serving until ``stop()`` / the ``with`` block ends."""

    def __init__(self, rules: Sequence[Rule], default: str = "", model: str = "scripted",
                 record_path: Path | None = None, port: int = 0, delay_s: float = 0.0,
                 streams: bool = True) -> None:  # fmt: skip
        self.rules = list(rules)
        self.streams = streams  # False: a server that answers ``"stream": true`` with one JSON body, as some do
        self.delay_s = delay_s  # each answer waits this long (to see how many requests are in flight at once)
        self.in_flight = self.max_in_flight = 0
        self.default = default
        self.model = model
        self.record_path = record_path
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL (``http://127.0.0.1:<port>/v1``)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def answer(self, seen: dict[str, Any]) -> str:
        """The scripted answer for a recorded request."""
        text = "\n".join(seen["texts"])
        hashes = {m["sha256"] for m in seen["media"]}
        best: tuple[int, str] | None = None
        for needle, sha, answer in self.rules:
            if needle in text and (sha is None or sha in hashes) and (best is None or len(needle) > best[0]):
                best = (len(needle), answer)
        return best[1] if best else self.default

    def _record(self, seen: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(seen)
            if self.record_path is not None:
                with self.record_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({k: v for k, v in seen.items() if k != "body"}) + "\n")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                chat = self.path.endswith("/chat/completions")
                if not chat and not self.path.endswith("/completions"):
                    self._send(404, {"error": {"message": f"only (chat) completions here, not {self.path}"}})
                    return
                seen = parse_chat_request(body) if chat else _completion_view(body)
                seen["answer"] = server.answer(seen)
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                time.sleep(server.delay_s)
                with server._lock:
                    server.in_flight -= 1
                seen["path"], seen["body"] = self.path, body
                server._record(seen)
                if body.get("stream") and server.streams:
                    self._stream(chat, seen["answer"], bool((body.get("stream_options") or {}).get("include_usage")))
                    return
                choice: dict[str, Any] = ({"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": seen["answer"]}} if chat
                                          else {"index": 0, "finish_reason": "stop", "text": seen["answer"]})
                self._send(200, {"id": "scripted", "object": "chat.completion" if chat else "text_completion",
                                 "model": server.model, "choices": [choice],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})  # fmt: skip

            def _stream(self, chat: bool, answer: str, usage: bool) -> None:
                """The answer as server-sent events, one word per chunk, then usage (when asked) and [DONE]."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                words = [w + " " for w in answer.split(" ")]
                words[-1] = words[-1][:-1]
                for word in words:
                    part = {"delta": {"content": word}} if chat else {"text": word}
                    event = {"id": "scripted", "model": server.model, "choices": [{"index": 0, **part}]}
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.flush()
                if usage:
                    tail = {"id": "scripted", "choices": [], "usage": {"prompt_tokens": 1,
                                                                       "completion_tokens": len(words)}}  # fmt: skip
                    self.wfile.write(b"data: " + json.dumps(tail).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler

    def start(self) -> ScriptedServer:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the server in the foreground (rules from a JSON list of [needle, sha or null, answer])."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rules", type=Path, required=True)
    ap.add_argument("--record", type=Path)
    ap.add_argument("--default", default="")
    args = ap.parse_args(argv)
    rules = [(str(n), s, str(a)) for n, s, a in json.loads(args.rules.read_text())]
    srv = ScriptedServer(rules, args.default, record_path=args.record, port=args.port)
    print(srv.url, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        srv._httpd.serve_forever()


if __name__ == "__main__":
    main()
