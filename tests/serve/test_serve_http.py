"""`lmmbench serve` over real HTTP on 127.0.0.1: the openai client, SSE format, errors, auth."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest
from serve_helpers import free_port, png_data_uri

from lmmbench.serve import ServeConfig, ServerThread

METRIC_KEYS = {"queue_ms", "ttft_ms", "tpot_ms", "e2e_ms", "prompt_tokens", "completion_tokens",
               "process_peak_memory_bytes"}  # this server process's memory, never the whole device's


def _client(srv: ServerThread, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=30)


def test_openai_client_chat_and_completions(llm_server: ServerThread) -> None:
    client = _client(llm_server)
    assert [m.id for m in client.models.list().data] == ["tiny-llm"]
    chat = client.chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "hello"}], max_tokens=6, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert chat.choices[0].finish_reason == "length" and chat.usage is not None
    assert chat.usage.completion_tokens == 6
    extra: dict[str, Any] = chat.model_extra or {}
    assert set(extra["metrics"]) >= METRIC_KEYS
    assert extra["metrics"]["completion_tokens"] == 6
    again = client.chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "hello"}], max_tokens=6, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert again.choices[0].message.content == chat.choices[0].message.content
    comp = client.completions.create(model="tiny-llm", prompt="once upon", max_tokens=4, temperature=0, seed=3)
    assert comp.choices[0].finish_reason in ("length", "stop") and comp.usage is not None


def test_openai_client_streaming_with_usage(llm_server: ServerThread) -> None:
    client = _client(llm_server)
    stream = client.chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "stream it"}], max_tokens=8, temperature=0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    assert all(c.usage is None for c in chunks[:-1])
    assert set((chunks[-1].model_extra or {})["metrics"]) >= METRIC_KEYS
    full = client.chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "stream it"}], max_tokens=8, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert text == full.choices[0].message.content


def _sse_events(resp: httpx.Response) -> list[Any]:
    events = []
    for line in resp.text.split("\n\n"):
        if line.strip():
            assert line.startswith("data: ")
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_raw_sse_format_continuous_usage_and_done(llm_server: ServerThread) -> None:
    body = {
        "model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }  # fmt: skip
    resp = httpx.post(llm_server.url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["usage"] is not None for c in chunks)  # continuous usage: on every chunk
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 5
    assert "metrics" in chunks[-1] and all("metrics" not in c for c in chunks[:-1])
    # plain completions stream: no role chunk, text chunks, finish chunk, [DONE]
    resp = httpx.post(
        llm_server.url + "/v1/completions",
        json={"model": "tiny-llm", "prompt": "abc", "max_tokens": 3, "stream": True, "ignore_eos": True},
        timeout=30,
    )
    events = _sse_events(resp)
    assert events[-1] == "[DONE]" and events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["metrics"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b'{"model": "tiny-llm", "prompt": "x", "temperature": NaN}', 400, "NaN"),
        (b'["a list"]', 400, "JSON object"),
        (b'{"model": "other", "prompt": "x"}', 400, "not served"),
        (b'{"model": "tiny-llm", "prompt": "x", "temperature": -1}', 400, "temperature"),
        (b'{"model": "tiny-llm", "prompt": "x", "top_p": 3}', 400, "top_p"),
        (b'{"model": "tiny-llm", "prompt": "x", "n": 2}', 400, "n=1"),
        (b'{"model": "tiny-llm", "prompt": "x", "max_tokens": 0}', 400, "max_tokens"),
        (b'{"model": "tiny-llm", "prompt": [99999999]}', 400, "token ids"),
        (b'{"model": "tiny-llm", "prompt": "x", "max_tokens": 10000000}', 400, "context"),
        (b'{"model": "tiny-llm", "prompt": "__import__(\'os\').system(\'false\')", "max_tokens": 2}', 200, ""),
    ],
)
def test_bad_input_gets_openai_errors(llm_server: ServerThread, body: bytes, status: int, needle: str) -> None:
    resp = httpx.post(
        llm_server.url + "/v1/completions", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert resp.status_code == status, resp.text
    if status != 200:
        err = resp.json()["error"]
        assert needle in err["message"] and err["type"] == "invalid_request_error"


def test_bad_chat_input(llm_server: ServerThread) -> None:
    url = llm_server.url + "/v1/chat/completions"
    cases = [
        {"model": "tiny-llm", "messages": []},
        {"model": "tiny-llm", "messages": [{"role": "wizard", "content": "x"}]},
        {
            "model": "tiny-llm",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        },
    ]
    for body in cases:
        resp = httpx.post(url, json=body, timeout=30)
        assert resp.status_code == 400 and "error" in resp.json(), body


def test_oversized_body_gets_413_and_server_stays_up(llm_server: ServerThread) -> None:
    big = {"model": "tiny-llm", "prompt": "x" * (1024 * 1024)}
    resp = httpx.post(llm_server.url + "/v1/completions", json=big, timeout=30)
    assert resp.status_code == 413 and "exceeds" in resp.json()["error"]["message"]
    assert httpx.get(llm_server.url + "/health", timeout=5).json()["status"] == "ok"


def test_client_disconnect_frees_its_slot(llm_server: ServerThread) -> None:
    body = {"model": "tiny-llm", "prompt": "go on", "max_tokens": 20000, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", llm_server.url + "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(4)]
        assert any(line.startswith("data: ") for line in got)
        assert llm_server.engine.running
    deadline = time.monotonic() + 5
    while llm_server.engine.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not llm_server.engine.running


def test_metrics_endpoint_is_prometheus_text(llm_server: ServerThread) -> None:
    httpx.post(
        llm_server.url + "/v1/completions", json={"model": "tiny-llm", "prompt": "m", "max_tokens": 3}, timeout=30
    )
    text = httpx.get(llm_server.url + "/metrics", timeout=5).text
    for name in (
        "lmmbench_queue_depth ", "lmmbench_running_batch_size ", "lmmbench_generation_tokens_per_second ",
        "lmmbench_process_peak_memory_bytes ",
        "lmmbench_process_memory_bytes ", "lmmbench_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
        "lmmbench_time_per_output_token_seconds_count", "lmmbench_e2e_request_latency_seconds_sum",
    ):  # fmt: skip
        assert name in text, name
    for line in text.splitlines():
        assert line.startswith("#") or len(line.split(" ")) == 2, line
    ttft_count = [ln for ln in text.splitlines() if ln.startswith("lmmbench_time_to_first_token_seconds_count")]
    assert int(ttft_count[0].split()[1]) >= 1


def test_api_key_is_required_on_v1_routes() -> None:
    cfg = ServeConfig(model="tiny-llm", port=free_port(), api_key="s3cret", warmup=False)
    with ServerThread(cfg) as srv:
        assert httpx.get(srv.url + "/v1/models", timeout=5).status_code == 401
        wrong = httpx.get(srv.url + "/v1/models", headers={"Authorization": "Bearer nope"}, timeout=5)
        assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
        post = httpx.post(srv.url + "/v1/completions", json={"model": "tiny-llm", "prompt": "x"}, timeout=5)
        assert post.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            _client(srv, "bad").models.list()
        out = _client(srv, "s3cret").completions.create(model="tiny-llm", prompt="x", max_tokens=2)
        assert out.usage is not None and out.usage.completion_tokens >= 1
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200
    assert cfg.host == "127.0.0.1"


def test_vision_request_through_the_openai_client() -> None:
    cfg = ServeConfig(model="tiny-vl", port=free_port(), warmup=False)
    with ServerThread(cfg) as srv:
        client = _client(srv)
        msg = [
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": png_data_uri(56, 84, (10, 20, 200))}},
                {"type": "text", "text": "what is this?"},
            ]}
        ]  # fmt: skip
        out = client.chat.completions.create(
            model="tiny-vl", messages=msg, max_tokens=4, temperature=0, extra_body={"ignore_eos": True}
        )
        assert out.usage is not None and out.usage.completion_tokens == 4 and out.usage.prompt_tokens > 30
        bad = httpx.post(
            srv.url + "/v1/chat/completions", timeout=10,
            json={"model": "tiny-vl", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://example.invalid/cat.png"}}]}]},
        )  # fmt: skip
        assert bad.status_code == 400 and "data: URIs" in bad.json()["error"]["message"]
        audio = httpx.post(
            srv.url + "/v1/chat/completions", timeout=10,
            json={"model": "tiny-vl", "messages": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]},
        )  # fmt: skip
        assert audio.status_code == 400 and "audio" in audio.json()["error"]["message"]


def test_non_streaming_client_that_gives_up_frees_its_slot(llm_server: ServerThread) -> None:
    body = {"model": "tiny-llm", "prompt": "wait for me", "max_tokens": 20000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(llm_server.url + "/v1/completions", json=body, timeout=httpx.Timeout(5, read=0.5))
    deadline = time.monotonic() + 5
    while llm_server.engine.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not llm_server.engine.running and llm_server.engine.scheduler.num_waiting() == 0


def test_omni_audio_request_over_http() -> None:
    from serve_helpers import wav_base64

    cfg = ServeConfig(model="tiny-omni", port=free_port(), warmup=False)
    with ServerThread(cfg) as srv:
        content = [
            {"type": "input_audio", "input_audio": {"data": wav_base64(0.5), "format": "wav"}},
            {"type": "text", "text": "what do you hear?"},
        ]
        body = {
            "model": "tiny-omni", "messages": [{"role": "user", "content": content}], "max_tokens": 3,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
        }  # fmt: skip
        resp = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)
        events = _sse_events(resp)
        assert resp.status_code == 200 and events[-1] == "[DONE]"
        assert events[-2]["usage"]["completion_tokens"] == 3 and events[-2]["usage"]["prompt_tokens"] > 20
        assert events[-2]["metrics"]["ttft_ms"] > 0
        bad = {**body, "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "bm90IGF1ZGlv", "format": "wav"}}]}]}  # fmt: skip
        assert httpx.post(srv.url + "/v1/chat/completions", json=bad, timeout=30).status_code == 400


def test_one_token_response_says_null_for_tpot_and_a_measured_peak_memory(llm_server: ServerThread) -> None:
    """Unmeasured is null, never 0: one output token has no interval (tpot_ms null); memory is read right after the
    forward the request took part in, before it is answered (a positive resident set, not 0)."""
    body = {"model": "tiny-llm", "prompt": "once upon", "max_tokens": 1, "temperature": 0, "ignore_eos": True}
    one = httpx.post(llm_server.url + "/v1/completions", json=body, timeout=30).json()["metrics"]
    assert one["completion_tokens"] == 1
    assert one["tpot_ms"] is None
    assert isinstance(one["process_peak_memory_bytes"], int) and one["process_peak_memory_bytes"] > 10 * 2**20
    assert "peak_memory_bytes" not in one and "device_peak_memory_bytes" not in one  # the process's, by its name
    three = httpx.post(llm_server.url + "/v1/completions", json={**body, "max_tokens": 3}, timeout=30).json()
    assert three["metrics"]["completion_tokens"] == 3 and three["metrics"]["tpot_ms"] > 0
