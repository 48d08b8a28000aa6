"""A serve row given as a server command line: lmmbench's own test server started that way, and
`transformers serve` on CPU (a real third-party engine: /v1/models answers 500 until its cache folder
exists, so readiness goes through /health, and its stream ends without `data: [DONE]`), serving the
built-in tiny model folder. Each server's log is kept, its /metrics sampled, and its whole process group
stopped (the autouse fixture checks that nothing is left running). A command line that never comes up
fails its row after its ready_timeout_s, with what the endpoints answered and the log's tail."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main


def test_command_line_serve_rows_of_lmmbench_servers(write_plan: Any) -> None:
    path = write_plan([
        {"name": "ts", "kind": "serve",
         "options": {"command": "{python} -m lmmbench.cli.main testserver --host {host} --port {port} --ttft-ms 5",
                     "telemetry_interval_s": 0.2}},
        {"name": "load", "kind": "perf", "server": "ts", "options": {"num_requests": 6, "output_tokens": 3}},
        {"name": "never", "kind": "serve",  # a process that never answers: its own child is stopped with it
         "options": {"command": "sh -c 'sleep 60 & sleep 60' {port}", "ready_timeout_s": 2}},
        {"name": "late", "kind": "perf", "server": "never", "options": {"num_requests": 2}},
    ], name="cmdline")  # fmt: skip
    assert main(["batch", str(path)]) == 3
    out = path.parent / "out" / "cmdline"
    status = {n: json.loads((out / n / "status.json").read_text()) for n in ("ts", "load", "never", "late")}
    assert status["load"]["status"] == "ok" and status["load"]["metrics"]["ok"] == 6
    assert status["ts"]["status"] == "ok" and status["ts"]["metrics"]["telemetry_samples"] >= 1
    log = (out / "ts" / "server.log").read_text()
    assert log.startswith("$ ") and "testserver" in log.splitlines()[0]
    assert (out / "ts" / "telemetry.jsonl").is_file()
    assert status["never"]["status"] == "failed"
    assert "not ready after 2 s (/health: no answer, /v1/models: no answer)" in status["never"]["error"]
    assert "serve row 'never'" in status["late"]["error"]


def test_transformers_serve_on_cpu_as_a_serve_row(write_plan: Any, tmp_path: Path) -> None:
    if os.environ.get("CI") != "true":
        pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving] (lmmbench[serving])")
    from lmmbench.models.tiny import build_tiny_model

    model_dir = build_tiny_model("tiny-llm")
    hf_home = tmp_path / "hf"  # no cache folder: /v1/models answers 500, /health 200
    path = write_plan([
        {"name": "tf", "kind": "serve", "model": str(model_dir),
         "options": {"command": "{python} -m transformers.cli.transformers serve {model} --device cpu "
                                "--host {host} --port {port}",
                     "env": {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
                     "ready_timeout_s": 180, "telemetry_interval_s": 0}},
        {"name": "load", "kind": "perf", "server": "tf",
         "options": {"num_requests": 3, "output_tokens": 4, "ignore_eos": False, "rate": 5}},
    ], name="tfserve")  # fmt: skip
    assert main(["batch", str(path)]) == 0
    out = path.parent / "out" / "tfserve"
    load = json.loads((out / "load" / "status.json").read_text())
    assert load["status"] == "ok" and load["metrics"]["ok"] == 3, load
    assert load["metrics"]["ttft_ms_mean"] > 0
    assert "transformers.cli.transformers serve" in (out / "tf" / "server.log").read_text().splitlines()[0]


def test_a_ready_timeout_past_the_limits_table_is_refused_before_the_server_starts(
        write_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Every wait is bounded: ready_timeout_s 1e30 (a server that never answers would hold the plan for ever) is
    refused by the limits table's duration_s, in one line naming the row, before any process starts."""
    path = write_plan([
        {"name": "never", "kind": "serve",
         "options": {"command": "sh -c 'echo started > started.txt; sleep 60' {port}", "ready_timeout_s": 1e30}},
        {"name": "load", "kind": "perf", "server": "never", "options": {"num_requests": 2}},
    ], name="forever")  # fmt: skip
    assert main(["batch", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 1 'never'" in err[0] and "exceeds the limit duration_s" in err[0], err
    assert not (path.parent / "started.txt").exists() and not (path.parent / "out" / "forever" / "never").exists()
