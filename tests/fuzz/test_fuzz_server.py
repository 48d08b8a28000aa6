"""Every route of `testserver` and `serve`, fed malformed requests over a raw socket: a 4xx answer
(never 500, never a dropped connection, never a hang), and `/health` still answers afterwards."""

from __future__ import annotations

import base64
import io
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from lmmbench.core.net import free_loopback_port


def _zero_sample_wav() -> str:
    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros(0, dtype="float32"), 16000, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def _chat(content: Any, **extra: Any) -> bytes:
    return json.dumps({"model": "{model}", "messages": [{"role": "user", "content": content}], **extra}).encode()


# (id, method, path, body or None, extra header lines); the answer must be 4xx
REQUESTS: list[tuple[str, str, str, bytes | None, str]] = [
    ("invalid-json", "POST", "/v1/chat/completions", b"{not json", ""),
    ("json-not-object", "POST", "/v1/chat/completions", b"[1, 2]", ""),
    ("json-nested-100000", "POST", "/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000, ""),
    ("json-nested-100000-completions", "POST", "/v1/completions", b"{\"a\":" * 100_000 + b"1" + b"}" * 100_000, ""),
    ("not-utf8-body", "POST", "/v1/chat/completions", b'{"model": "\xff\xfe"}', ""),
    ("empty-body", "POST", "/v1/chat/completions", b"", ""),
    ("messages-not-list", "POST", "/v1/chat/completions", b'{"model": "{model}", "messages": 5}', ""),
    ("max-tokens-string", "POST", "/v1/chat/completions", _chat("hi", max_tokens="lots"), ""),
    ("max-tokens-negative", "POST", "/v1/chat/completions", _chat("hi", max_tokens=-3), ""),
    ("max-tokens-1e12", "POST", "/v1/chat/completions", _chat("hi", max_tokens=10**12), ""),
    ("stream-options-string", "POST", "/v1/chat/completions", _chat("hi", stream=True, stream_options="x"), ""),
    ("prompt-not-string", "POST", "/v1/completions", b'{"model": "{model}", "prompt": {"a": 1}}', ""),
    ("unknown-route", "GET", "/v1/nothing-here", None, ""),
    ("get-on-post-route", "GET", "/v1/chat/completions", None, ""),
    ("declared-1tb-body", "POST", "/v1/chat/completions", b"", "Content-Length: 1000000000000\r\n"),
]
SERVE_ONLY: list[tuple[str, str, str, bytes | None, str]] = [
    ("input-audio-zero-samples", "POST", "/v1/chat/completions",
     _chat([{"type": "text", "text": "hi"},
            {"type": "input_audio", "input_audio": {"data": "{wav0}", "format": "wav"}}]), ""),
    ("input-audio-not-base64", "POST", "/v1/chat/completions",
     _chat([{"type": "input_audio", "input_audio": {"data": "!!!", "format": "wav"}}]), ""),
    ("image-remote-url", "POST", "/v1/chat/completions",
     _chat([{"type": "image_url", "image_url": {"url": "http://example.invalid/x.png"}}]), ""),
]


def _raw(port: int, method: str, path: str, body: bytes | None, headers: str, timeout_s: float = 20) -> int:
    """Send one raw HTTP/1.1 request; the status code of the answer (0: connection dropped, no answer)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
    if body is not None and "Content-Length" not in headers:
        head += f"Content-Length: {len(body)}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall((head + headers + "\r\n").encode("latin-1") + (body or b""))
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                return 0
            data += chunk
    return int(data.split(b" ", 2)[1])


def _check(port: int, model: str, case: tuple[str, str, str, bytes | None, str]) -> None:
    name, method, path, body, headers = case
    if body is not None:
        body = body.replace(b"{model}", model.encode()).replace(b"{wav0}", _zero_sample_wav().encode()
                                                                  if b"{wav0}" in body else b"")
    status = _raw(port, method, path, body, headers)
    assert 400 <= status < 500, f"{name}: HTTP {status}"
    assert _raw(port, "GET", "/health", None, "") == 200, f"/health after {name}"


@pytest.fixture(scope="module")
def serve_port() -> Iterator[int]:
    from lmmbench.serve import ServeConfig, ServerThread

    cfg = ServeConfig(model="tiny-omni", port=free_loopback_port(), max_batch_size=2, max_queue=4)
    with ServerThread(cfg) as srv:
        yield srv.cfg.port


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", REQUESTS, ids=[c[0] for c in REQUESTS])
def test_testserver_answers_malformed_requests_with_4xx(case: tuple[str, str, str, bytes | None, str],
                                                       fuzz_url: str) -> None:  # fmt: skip
    _check(int(fuzz_url.rsplit(":", 1)[1]), "test-model", case)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", REQUESTS + SERVE_ONLY, ids=[c[0] for c in REQUESTS + SERVE_ONLY])
def test_serve_answers_malformed_requests_with_4xx(case: tuple[str, str, str, bytes | None, str],
                                                   serve_port: int) -> None:  # fmt: skip
    _check(serve_port, "tiny-omni", case)


def test_a_taken_port_is_one_line_and_exit_2(fuzz_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from lmmbench.cli.main import main

    port = fuzz_url.rsplit(":", 1)[1]
    for argv in (["testserver", "--port", port], ["testserver", "--port", port, "--workers", "2"],
                 ["serve", "--model", "tiny-llm", "--port", port]):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "cannot listen on" in err and port in err
