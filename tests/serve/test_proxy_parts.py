"""The measuring proxy's parts on hand-written upstream events: what is relayed at once, what is held for
``metrics``, how a whole answer is rebuilt, and the per-request GPU memory peak (NVML faked: no GPU here)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from lmmbench.serve.proxy.measure import Measure, StreamRelay, WholeAnswer
from lmmbench.serve.proxy.memory import GpuMemoryPeaks


def _chunk(content: str | None = None, finish: str | None = None, **top: Any) -> bytes:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice], **top}
    return json.dumps(body).encode()


def _events(out: bytes) -> list[Any]:
    return [json.loads(p) if p != "[DONE]" else p for p in
            (e[len("data: "):] for e in out.decode().split("\n\n") if e)]  # fmt: skip


def test_stream_relay_forwards_tokens_at_once_and_puts_metrics_on_the_last_chunk_before_done() -> None:
    m = Measure(arrival_ns=0)
    relay = StreamRelay(m, drop_usage=True)  # the client did not ask for usage: the proxy did
    ms = 1_000_000
    assert _events(relay.feed(5 * ms, json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                  "content": ""}}]}).encode()))  # fmt: skip
    assert m.first_token_ns == 0  # a role chunk is not a token
    assert _events(relay.feed(40 * ms, _chunk("a")))[0]["choices"][0]["delta"]["content"] == "a"
    assert relay.feed(50 * ms, _chunk("b"))
    assert relay.feed(60 * ms, _chunk(None, "stop")) == b""  # held
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert relay.feed(61 * ms, json.dumps({"id": "c1", "choices": [], "usage": usage}).encode()) == b""
    assert relay.feed(62 * ms, b"[DONE]") == b""
    events = _events(relay.finish(m.metrics()))
    assert events[-1] == "[DONE]" and len(events) == 2  # the usage chunk the client did not ask for is dropped
    metrics = events[0]["metrics"]
    assert events[0]["choices"][0]["finish_reason"] == "stop"
    assert metrics["ttft_ms"] == 40.0 and metrics["e2e_ms"] == 62.0 and metrics["tpot_ms"] == 22.0
    assert metrics["completion_tokens"] == 2 and metrics["queue_ms"] is None


def test_a_stream_without_done_or_finish_chunk_still_gets_its_metrics() -> None:
    m = Measure(arrival_ns=0)
    relay = StreamRelay(m)
    relay.feed(1_000_000, _chunk("only"))
    events = _events(relay.finish(m.metrics()))
    assert len(events) == 1 and events[0]["choices"] == [] and events[0]["id"] == "c1"  # no [DONE]: none added
    assert events[0]["metrics"]["ttft_ms"] == 1.0 and events[0]["metrics"]["completion_tokens"] is None
    assert events[0]["metrics"]["tpot_ms"] is None  # no usage: output tokens unknown, TPOT unmeasured


def test_whole_answer_rebuilds_content_reasoning_and_tool_calls() -> None:
    whole = WholeAnswer(chat=True)
    for delta in ({"role": "assistant", "content": ""}, {"reasoning_content": "think"}, {"content": "Hel"},
                  {"content": "lo"}, {"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                                                      "function": {"name": "f", "arguments": "{\"a\""}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}):  # fmt: skip
        whole.feed({"id": "x", "model": "m", "created": 7, "choices": [{"index": 0, "delta": delta}]})
    whole.feed({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    body = whole.body({"completion_tokens": 5}, {"ttft_ms": 1.0})
    msg = body["choices"][0]["message"]
    assert body["object"] == "chat.completion" and body["created"] == 7 and body["metrics"] == {"ttft_ms": 1.0}
    assert msg["content"] == "Hello" and msg["reasoning_content"] == "think"
    assert msg["tool_calls"] == [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    assert body["choices"][0]["finish_reason"] == "tool_calls" and body["usage"] == {"completion_tokens": 5}


class _FakeNvml:
    """Stands in for pynvml (no GPU on this machine): two GPUs whose used memory follows ``used``."""

    def __init__(self) -> None:
        self.used = [100, 200]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=self.used[h], total=1000)


def test_peak_memory_with_a_fake_nvml_is_the_largest_reading_during_the_request() -> None:
    fake = _FakeNvml()
    peaks = GpuMemoryPeaks(fake, interval_ms=1)
    try:
        key = peaks.begin()
        fake.used = [500, 400]  # a spike while the request runs, sampled by the thread
        deadline = time.monotonic() + 5
        while peaks._peaks.get(key) != 900 and time.monotonic() < deadline:  # type: ignore[arg-type]
            time.sleep(0.005)
        fake.used = [10, 10]
        assert peaks.end(key) == 900  # the spike, summed over both GPUs, not the reading at the end
        assert peaks.end(peaks.begin()) == 20
    finally:
        peaks.close()


def test_without_nvml_the_peak_is_unmeasured() -> None:
    class NoDriver(_FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    peaks = GpuMemoryPeaks(NoDriver())
    assert not peaks.available and "NVML" in peaks.reason
    assert peaks.end(peaks.begin()) is None


def test_server_metrics_survive_a_resumed_perf_run_and_summarize_with_their_spread() -> None:
    from lmmbench.metrics.perf_metrics import request_values, summarize_records
    from lmmbench.sessions.perf.resume import record_from_row
    from lmmbench.testing import make_record

    recs = []
    for i, server_ttft in enumerate((10.0, 12.0, 14.0)):
        rec = make_record(request_id=i, ttft_ms=20.0)  # client: 20 ms to the first token, from sending
        rec.server_metrics = {"queue_ms": None, "ttft_ms": server_ttft, "tpot_ms": 5.0, "e2e_ms": 30.0,
                              "process_peak_memory_bytes": 1000 + i, "device_peak_memory_bytes": 5000 + i}  # fmt: skip
        recs.append(rec)
    diffs = summarize_records(recs).metrics["client_minus_server_ttft_ms"]
    assert (diffs.p50, diffs.min, diffs.max) == (pytest.approx(8.0), pytest.approx(6.0), pytest.approx(10.0))
    summary = summarize_records(recs).metrics  # the process's and the device's memory: two series, two names
    process, device = summary["server_process_peak_memory_bytes"], summary["server_device_peak_memory_bytes"]
    assert process.unit == "bytes" == device.unit and process.max == 1002 and device.max == 5002
    assert "server_peak_memory_bytes" not in summary
    rows = [json.loads(json.dumps({**request_values(r), "labels": {}})) for r in recs]  # as records.jsonl holds it
    again = [request_values(record_from_row(row)) for row in rows]
    keys = [k for k in rows[0] if k.startswith(("server_", "client_minus_server_"))]
    assert len(keys) == 8 and [{k: a[k] for k in keys} for a in again] == [{k: r[k] for k in keys} for r in rows]
    assert "client_minus_server_ttft_ms" not in summarize_records([make_record()]).metrics  # none carried: none made


def test_several_choices_have_no_tpot() -> None:
    m = Measure(arrival_ns=0)
    for t, index in ((10, 0), (20, 1), (30, 0)):
        m.see(t * 1_000_000, {"choices": [{"index": index, "delta": {"content": "x"}}]})
    m.see(40_000_000, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 6}})
    metrics = m.metrics()
    assert metrics["ttft_ms"] == 10.0 and metrics["e2e_ms"] == 40.0 and metrics["tpot_ms"] is None
