"""`lmmbench proxy`: a real proxy process in front of a real `lmmbench testserver` (injected TTFT 30 ms, ITL 5 ms),
both on 127.0.0.1 ports chosen at run time. The proxy's server-side TTFT is at least the injected delay and at
most the client's TTFT of the same request, streamed and whole, chat and completions; perf and eval keep it.
"""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proxy_process import running_proxy

from lmmbench.backends.openai_http import OpenAIHttpClient
from lmmbench.backends.openai_stream import finalize_record
from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.core.request_records import PerfRequest, RequestRecord
from lmmbench.metrics.perf_metrics import request_values
from lmmbench.testing import running_testserver

TTFT_MS, ITL_MS = 30.0, 5.0
# the built-in server's metrics object (engines.requests.RequestMetrics.as_dict), but memory: the proxy reads the
# whole device's (NVML), so it says device_peak_memory_bytes where the server says process_peak_memory_bytes
METRIC_KEYS = {"queue_ms", "ttft_ms", "tpot_ms", "e2e_ms", "prompt_tokens", "completion_tokens",
               "device_peak_memory_bytes", "preprocess_ms"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=TTFT_MS, itl_ms=ITL_MS)) as url:
        yield url


@pytest.fixture(scope="module")
def proxy(upstream: str) -> Iterator[str]:
    with running_proxy(upstream + "/v1") as url:
        for endpoint in ("chat", "completions"):  # warm: the first request opens the upstream connection
            _request(url, endpoint, stream=True, max_tokens=2)
        yield url


def _request(url: str, endpoint: str, *, stream: bool, max_tokens: int = 4, extra: dict[str, Any] | None = None,
             model: str = "test-model") -> RequestRecord:  # fmt: skip
    """One request through lmmbench's own perf client (its instants are the client's TTFT and latency)."""
    if endpoint == "chat":
        payload: dict[str, Any] = {"messages": [{"role": "user", "content": "one two three"}]}
    else:
        payload = {"prompt": "one two three"}
    payload.update(max_tokens=max_tokens, **(extra or {}))

    async def go() -> RequestRecord:
        client = OpenAIHttpClient(url, model, continuous_usage=False)
        return await client.request_once(PerfRequest(0, payload, endpoint=endpoint), stream=stream, timeout_s=30)

    rec = asyncio.run(go())
    return finalize_record(rec, keep_text=True)


@pytest.mark.serial
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_server_ttft_is_the_injected_delay_or_more_and_the_clients_or_less(proxy: str, endpoint: str,
                                                                          stream: bool) -> None:  # fmt: skip
    rec = _request(proxy, endpoint, stream=stream)
    assert rec.ok, rec.error_message
    m = rec.server_metrics
    assert m is not None and set(m) == METRIC_KEYS
    client_ttft_ms = (rec.first_token_ns - rec.sent_ns) / 1e6
    client_e2e_ms = (rec.end_ns - rec.sent_ns) / 1e6
    assert TTFT_MS <= m["ttft_ms"] <= client_ttft_ms
    # 4 tokens: the last leaves the test server 3 ITL after the first's instant (timers at absolute instants)
    assert max(m["ttft_ms"], TTFT_MS + 3 * ITL_MS) <= m["e2e_ms"] <= client_e2e_ms
    assert m["completion_tokens"] == 4 and m["prompt_tokens"] == 3  # the upstream's usage
    assert m["tpot_ms"] == pytest.approx((m["e2e_ms"] - m["ttft_ms"]) / 3, abs=0.002)  # rounded to 1 us
    assert m["queue_ms"] is None and m["preprocess_ms"] is None  # the proxy cannot see the engine's queue
    assert m["device_peak_memory_bytes"] is None  # no NVML on this machine: unmeasured, not 0
    assert rec.output_text == " alpha bravo charlie delta"  # the upstream's answer, unchanged


@pytest.mark.serial
def test_a_stream_is_relayed_chunk_by_chunk_with_metrics_on_the_last_chunk_before_done(proxy: str,
                                                                                       upstream: str) -> None:
    direct = _request(upstream, "chat", stream=True, max_tokens=6)
    rec = _request(proxy, "chat", stream=True, max_tokens=6)
    assert rec.saw_done and rec.finish_reason == "length" and rec.output_text == direct.output_text
    assert len(rec.chunk_times_ns) == 6  # each token chunk forwarded as it came, none merged
    # forwarded as they arrived (5 ms apart), not gathered to the end: they reach the client in separate reads
    # (at least 4 distinct instants of 6: two may still share a read when the machine is loaded)
    assert len(set(rec.chunk_times_ns)) >= 4
    assert direct.server_metrics is None  # the test server sends no metrics: only the proxy adds them


@pytest.mark.serial
def test_a_one_token_answer_has_no_tpot_and_an_echo_request_no_ttft(proxy: str) -> None:
    one = _request(proxy, "completions", stream=False, max_tokens=1)
    assert one.server_metrics is not None and one.server_metrics["completion_tokens"] == 1
    assert one.server_metrics["tpot_ms"] is None and one.server_metrics["ttft_ms"] >= TTFT_MS
    echo = _request(proxy, "completions", stream=False, max_tokens=2, extra={"echo": True})
    assert echo.server_metrics is not None  # forwarded whole: no first token to see, latency measured
    assert echo.server_metrics["ttft_ms"] is None and echo.server_metrics["tpot_ms"] is None
    assert echo.server_metrics["e2e_ms"] >= TTFT_MS + ITL_MS


def test_upstream_errors_and_passthrough_routes(proxy: str) -> None:
    with urllib.request.urlopen(proxy + "/v1/models", timeout=10) as resp:
        assert json.loads(resp.read())["data"][0]["id"] == "test-model"
    req = urllib.request.Request(proxy + "/v1/chat/completions", data=json.dumps(
        {"model": "other-model", "messages": [{"role": "user", "content": "x"}]}).encode(),
        headers={"Content-Type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 404 and "other-model" in err.value.read().decode()  # the upstream's answer


def test_an_upstream_gone_after_the_start_is_a_502_with_an_error_object() -> None:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1)) as gone:
        proxy = running_proxy(gone)
        url = proxy.__enter__()
    try:  # the test server is stopped now; the proxy still runs
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(
            {"model": "test-model", "prompt": "x", "max_tokens": 2}).encode(),
            headers={"Content-Type": "application/json"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        body = json.loads(err.value.read())
        assert err.value.code == 502 and body["error"]["type"] == "upstream_error" and gone in body["error"]["message"]
    finally:
        proxy.__exit__(None, None, None)


@pytest.mark.serial
def test_perf_through_the_proxy_stores_server_metrics_and_the_client_minus_server_difference(
    proxy: str, upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["perf", "--model", "test-model", "--concurrency", "2", "--num-requests", "12", "--input-tokens", "8",
            "--output-tokens", "4", "--no-plots"]  # fmt: skip
    assert main([*base, "--url", proxy, "--out-dir", str(tmp_path / "p")]) == 0
    run = next((tmp_path / "p" / "perf").iterdir())
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    assert len(records) == 12
    for r in records:
        assert TTFT_MS <= r["server_ttft_ms"] <= r["ttft_send_ms"]
        if r["client_minus_server_ttft_ms"] is None:  # the whole stream came in one read (seen at load 15): its
            assert r["e2e_send_ms"] == pytest.approx(r["ttft_send_ms"])  # first token is its end; nothing claimed
        else:
            assert r["client_minus_server_ttft_ms"] == pytest.approx(r["ttft_send_ms"] - r["server_ttft_ms"])
        assert r["server_e2e_ms"] <= r["e2e_send_ms"] and r["server_tpot_ms"] is not None
        assert r["server_device_peak_memory_bytes"] is None and r["server_queue_ms"] is None
        assert "server_peak_memory_bytes" not in r and r["server_process_peak_memory_bytes"] is None
    row = next(csv.DictReader((run / "summary.csv").open()))
    diffs = sorted(r["client_minus_server_ttft_ms"] for r in records)
    assert float(row["client_minus_server_ttft_ms_p50"]) == pytest.approx((diffs[5] + diffs[6]) / 2, rel=1e-6)
    assert float(row["client_minus_server_ttft_ms_std"]) >= 0
    assert "client-server TTFT p50" in capsys.readouterr().err
    # straight to the test server, which sends no metrics: the server columns stay empty, no difference is made up
    assert main([*base, "--url", upstream, "--out-dir", str(tmp_path / "d")]) == 0
    run = next((tmp_path / "d" / "perf").iterdir())
    direct = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    assert all(r["server_ttft_ms"] is None and r["client_minus_server_ttft_ms"] is None for r in direct)
    assert "client_minus_server_ttft_ms_p50" not in next(csv.DictReader((run / "summary.csv").open()))


def test_eval_against_the_proxy_keeps_the_server_metrics_in_its_predictions(proxy: str, tmp_path: Path) -> None:
    argv = ["eval", "--model", proxy, "--tokenizer", "tiny-llm", "--tasks", "sample_qa", "--limit", "2",
            "--max-length", "4096", "--out-dir", str(tmp_path / "e")]  # fmt: skip
    assert main(argv) in (0, 1)  # the test server's words are wrong answers; the predictions are what is checked
    preds = [json.loads(x) for x in next((tmp_path / "e").glob("*/predictions/sample_qa.jsonl")).read_text()
             .splitlines()]  # fmt: skip
    assert len(preds) == 2
    for p in preds:
        m = p["server_metrics"]
        assert set(m) == METRIC_KEYS and m["ttft_ms"] >= TTFT_MS and m["e2e_ms"] >= m["ttft_ms"]


def test_an_lmms_benchmark_through_the_proxy_before_a_server_that_never_streams(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted server answers every request with one JSON body, stream or not: the proxy passes it on with
    its latency (TTFT unseen: null), and eval's lmms-eval path keeps that in its predictions."""
    from lmmbench.testing import mm_datasets
    from lmmbench.testing.scripted_server import ScriptedServer

    hf = tmp_path / "hf"
    for name, value in (("HF_HOME", str(hf)), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    for mod in ("huggingface_hub.constants", "datasets.config"):  # read once, at import, by an earlier test
        if mod in sys.modules:
            monkeypatch.setattr(sys.modules[mod], "HF_HUB_OFFLINE", True)
    mm_datasets.write_all(hf)
    with (ScriptedServer(mm_datasets.rules(), default="zzz", streams=False) as srv,
          running_proxy(srv.url.removesuffix("/v1")) as px):
        assert main(["eval", "--model", px, "--tokenizer", "tiny-vl", "--tasks", "chartqa", "--limit", "2",
                     "--out-dir", str(tmp_path / "e")]) in (0, 1)  # fmt: skip
    preds = [json.loads(x) for x in next((tmp_path / "e").glob("*/predictions/chartqa.jsonl")).read_text()
             .splitlines()]  # fmt: skip
    assert len(preds) == 2
    for p in preds:
        m = p["server_metrics"]
        assert m["ttft_ms"] is None and m["tpot_ms"] is None and m["e2e_ms"] > 0


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_the_perf_client_keeps_the_builtin_servers_metrics(llm_server: Any, stream: bool) -> None:
    rec = _request(llm_server.url, "chat", stream=stream, model="tiny-llm", max_tokens=8,
                   extra={"temperature": 0, "ignore_eos": True})
    server_keys = METRIC_KEYS - {"device_peak_memory_bytes"} | {"process_peak_memory_bytes"}  # its process's memory
    assert rec.ok and rec.server_metrics is not None and set(rec.server_metrics) == server_keys
    values = request_values(rec)
    assert values["server_ttft_ms"] == rec.server_metrics["ttft_ms"] <= values["ttft_send_ms"]
    assert values["server_queue_ms"] is not None  # the built-in server sees its own queue
    assert values["server_process_peak_memory_bytes"] > 0 and values["server_device_peak_memory_bytes"] is None
    assert values["server_e2e_ms"] <= values["e2e_send_ms"]
    if stream and rec.end_ns > rec.first_token_ns:  # (a fast model's whole stream may come in one read)
        assert values["client_minus_server_ttft_ms"] == values["ttft_send_ms"] - values["server_ttft_ms"]
    if not stream:  # a whole answer's client TTFT is its latency: no TTFT difference is made up for it
        assert values["client_minus_server_ttft_ms"] is None


@pytest.mark.parametrize("upstream_arg", ["not-a-url", "ftp://127.0.0.1:1", "http://127.0.0.1:{free}"])
def test_a_bad_upstream_is_one_line_and_exit_2(upstream_arg: str) -> None:
    arg = upstream_arg.format(free=free_loopback_port())
    proc = subprocess.run([sys.executable, "-m", "lmmbench.cli.main", "proxy", "--upstream", arg, "--port",
                           str(free_loopback_port())], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--upstream" in lines[0] and "Traceback" not in proc.stderr
