"""backend-comparison: the request payload, reading lmmbench serve's metrics, a run against the shipped test
server (injected TTFT as ground truth, no server metrics) and one against a built-in lmmbench serve."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from lmmbench.specs.backend_comparison import BackendComparisonOptions, chat_payload, server_metrics_of


def test_chat_payload_carries_the_media_in_order(tmp_path: Path) -> None:
    img = tmp_path / "a.png"
    img.write_bytes(b"\x89PNG fake")
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"RIFF fake")
    body = chat_payload("What?", img, wav)
    parts = body["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["image_url", "input_audio", "text"]
    assert parts[0]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    assert parts[1]["input_audio"] == {"data": base64.b64encode(b"RIFF fake").decode(), "format": "wav"}
    assert body["max_tokens"] == 1 and body["temperature"] == 0.0
    assert chat_payload("Just text.", None, None, max_tokens=8)["messages"][0]["content"] == "Just text."


def test_server_metrics_of_reads_the_last_chunk() -> None:
    events = [b'{"choices":[{"delta":{"role":"assistant"}}]}',
              b'{"choices":[{"delta":{"content":"x"}}]}',
              b'{"choices":[],"usage":{"prompt_tokens":3},"metrics":{"queue_ms":0.5,"ttft_ms":3.9,"note":"x"}}',
              b"[DONE]"]
    assert server_metrics_of(events) == {"queue_ms": 0.5, "ttft_ms": 3.9}
    assert server_metrics_of(events[:2]) == {}


def _run(tmp_path: Path, **kw: object) -> tuple[Path, dict[str, object]]:
    from lmmbench.sessions.spec_session import run_spec
    from lmmbench.specs.backend_comparison import BackendComparisonSpec

    opts = BackendComparisonOptions(out_dir=tmp_path, repeats=2, warmup=1, limit=2, progress=False, **kw)
    spec_dir = run_spec(BackendComparisonSpec.name, opts).spec_dir
    return spec_dir, json.loads((spec_dir / "backend-comparison_analysis.json").read_text())


def test_against_the_test_server_injected_ttft(tmp_path: Path, port: int) -> None:
    import csv

    from lmmbench.config.perf.testserver import TestServerConfig
    from lmmbench.testing.fixtures import running_testserver

    with running_testserver(TestServerConfig(port=port, ttft_ms=60.0, accept_any_model=True)) as url:
        spec_dir, analysis = _run(tmp_path, endpoints=[url], endpoint_models=["test-model"])
    assert analysis["rows_failed"] == 0 and analysis["rows_ok"] == 8  # 2 samples x 2 backends x 2 repeats
    with (spec_dir / "backend-comparison_results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    remote = [r for r in rows if r["backend"] == url]
    assert len(remote) == 4
    for r in remote:
        assert 60.0 <= float(r["client_ttft_ms"]) < 60.0 + 1000  # the injected TTFT is a floor
        assert r["server_ttft_ms"] == ""  # the test server reports no metrics: no split
    local = [r for r in rows if r["backend"] == "in-process"]
    for r in local:  # CSV cells keep 6 significant digits
        total = float(r["preprocess_ms"]) + float(r["ttft_ms"])
        assert float(r["request_ttft_ms"]) == pytest.approx(total, rel=1e-5, abs=0.02)
    assert "reports no metrics" in str(analysis["finding"])
    assert (spec_dir / "backend-comparison_plot.png").is_file()


def test_against_a_builtin_lmmbench_serve(tmp_path: Path) -> None:
    spec_dir, analysis = _run(tmp_path)
    assert analysis["rows_failed"] == 0, analysis.get("failures")
    per_sample = analysis["per_sample"]
    assert isinstance(per_sample, dict) and per_sample
    for backends in per_sample.values():
        (remote,) = [v for k, v in backends.items() if k != "in-process"]
        local = backends["in-process"]
        # the server's own TTFT is inside the client's; the parts add up
        assert 0 < remote["server_ttft_ms"] <= remote["request_ttft_ms"]
        assert remote["server_queue_ms"] + remote["server_preprocess_ms"] + remote["server_compute_ms"] == \
            pytest.approx(remote["server_ttft_ms"], abs=0.05)
        assert remote["prompt_tokens"] == local["prompt_tokens"]  # the same prompt reached the model
    assert not (spec_dir / "builtin-serve.log").read_text().count("Traceback")
