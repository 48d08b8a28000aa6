"""`proxy` rows: `lmmbench proxy` started by the plan in front of a serve row (or a URL), reached by perf / eval
rows with server=<proxy row> as a serve row is; its server-side metrics land in the perf row's records. A real
test server, a real proxy process, real perf; refusals name the row and the field."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.executors.plan import load_plan
from lmmbench.executors.runner import resolve_plan


@pytest.mark.serial
def test_serve_row_then_proxy_row_then_perf_row(write_plan: Any) -> None:
    path = write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 30, "itl_ms": 2}},
        {"name": "px", "kind": "proxy", "options": {"upstream": "ts"}},
        {"name": "load", "kind": "perf", "server": "px", "options": {"num_requests": 6, "output_tokens": 3}},
    ], name="proxied")  # fmt: skip
    assert main(["batch", str(path)]) == 0
    out = path.parent / "out" / "proxied"
    status = {n: json.loads((out / n / "status.json").read_text()) for n in ("ts", "px", "load")}
    assert status["px"]["status"] == "ok" and status["px"]["kind"] == "proxy"
    ts_url = status["ts"]["metrics"]["url"]
    assert f"proxy --upstream {ts_url}" in (out / "px" / "server.log").read_text().splitlines()[0]
    assert status["load"]["status"] == "ok" and status["load"]["metrics"]["server_ttft_ms_p50"] >= 30
    records = [json.loads(x) for x in next((out / "load").glob("perf/*/records.jsonl")).read_text().splitlines()]
    assert len(records) == 6
    assert all(30 <= r["server_ttft_ms"] <= r["ttft_send_ms"] for r in records)
    assert not (out / "px" / "telemetry.jsonl").exists()  # the serve row samples /metrics; the proxy does not


@pytest.mark.parametrize(("rows", "message"), [
    ([{"name": "px", "kind": "proxy"}], "row 1 'px': options.upstream: a proxy row needs upstream="),
    ([{"name": "a", "kind": "command", "options": {"command": "true"}},
      {"name": "px", "kind": "proxy", "options": {"upstream": "a"}}],
     "row 2 'px': options.upstream: 'a' is neither a URL nor the name of a serve row"),
    ([{"name": "px", "kind": "proxy", "model": "m", "options": {"upstream": "http://127.0.0.1:9"}}],
     "row 1 'px': model: a proxy row serves what its upstream serves"),
    ([{"name": "px", "kind": "proxy", "options": {"upstream": "http://127.0.0.1:9", "ttft_ms": 3}}],
     "row 1 'px': options.ttft_ms"),
    ([{"name": "px", "kind": "proxy", "options": {"upstream": "http://127.0.0.1:9"}},
      {"name": "c", "kind": "command", "needs": ["px"], "options": {"command": "true"}}],
     "row 2 'c': needs: 'px' is a proxy row; name it with server=<row> instead"),
])  # fmt: skip
def test_proxy_rows_refused_where_they_cannot_act(write_plan: Any, rows: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace("?", r"\?")):
        resolve_plan(load_plan(write_plan(rows)))


def test_a_proxy_row_whose_upstream_failed_fails_its_rows(write_plan: Any, tmp_path: Path) -> None:
    path = write_plan([
        {"name": "bad", "kind": "serve", "options": {"command": "sh -c 'exit 3' {port}", "ready_timeout_s": 2}},
        {"name": "px", "kind": "proxy", "options": {"upstream": "bad"}},
        {"name": "load", "kind": "perf", "server": "px", "options": {"num_requests": 2}},
    ], name="failing")  # fmt: skip
    assert main(["batch", str(path)]) != 0
    out = path.parent / "out" / "failing"
    px = json.loads((out / "px" / "status.json").read_text())
    assert px["status"] == "failed" and "upstream serve row 'bad' did not start" in px["error"]
    load = json.loads((out / "load" / "status.json").read_text())
    assert load["status"] == "failed" and "px" in load["error"]


def test_transformers_serve_behind_a_proxy_row(write_plan: Any, tmp_path: Path) -> None:
    """A real third-party engine upstream: `transformers serve` on CPU streams without `data: [DONE]`, often all
    tokens in one chunk; the proxy adds the metrics to its finish chunk and adds no [DONE] it never sent."""
    if os.environ.get("CI") != "true":
        pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving] (lmmbench[serving])")
    from lmmbench.models.tiny import build_tiny_model

    model_dir = build_tiny_model("tiny-llm")
    path = write_plan([
        {"name": "tf", "kind": "serve", "model": str(model_dir),
         "options": {"command": "{python} -m transformers.cli.transformers serve {model} --device cpu "
                                "--host {host} --port {port}",
                     "env": {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
                     "ready_timeout_s": 180, "telemetry_interval_s": 0}},
        {"name": "px", "kind": "proxy", "options": {"upstream": "tf"}},
        {"name": "load", "kind": "perf", "server": "px",
         "options": {"num_requests": 3, "output_tokens": 4, "ignore_eos": False, "rate": 5}},
    ], name="tfproxy")  # fmt: skip
    assert main(["batch", str(path)]) == 0
    out = path.parent / "out" / "tfproxy"
    load = json.loads((out / "load" / "status.json").read_text())
    assert load["status"] == "ok" and load["metrics"]["ok"] == 3, load
    records = [json.loads(x) for x in next((out / "load").glob("perf/*/records.jsonl")).read_text().splitlines()]
    for r in records:
        assert 0 < r["server_ttft_ms"] <= r["ttft_send_ms"] and r["server_e2e_ms"] <= r["e2e_send_ms"]
        assert r["saw_done"] is False  # transformers serve sends none; the proxy invents none
