"""A failing row ends only itself: a requirement pip cannot find, an interpreter that does not exist and a
server that never comes up each fail their row (a status.json with the cause), every other row runs, and
plan.json and the summary are written; the plan exits 3 (partial, docs/reliability.md). A perf row runs on
another Python (3.12) with none of the driver's 3.11 packages leaking into its venv."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmmbench.cli.main import main
from pacer import returns_before_pacer


def test_failed_rows_end_only_themselves(write_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_plan([
        {"name": "good", "kind": "eval", "model": "tiny-llm", "options": {"tasks": ["sample_mc"], "limit": 2,
                                                                           "threads": 1}},
        {"name": "nopy", "kind": "eval", "model": "tiny-llm", "executor": "venv", "python": "3.99",
         "options": {"tasks": ["sample_mc"], "limit": 2}},
        {"name": "oldpy", "kind": "perf", "executor": "venv", "python": "3.9",
         "options": {"url": "http://127.0.0.1:1/v1", "num_requests": 3}},
        {"name": "badreq", "kind": "eval", "model": "tiny-llm", "executor": "venv",
         "requirements": ["no-such-package-lmmbench-test==9.9"], "options": {"tasks": ["sample_mc"], "limit": 2}},
        {"name": "dead", "kind": "serve", "model": "/no/such/model/dir", "options": {"command": "serve"}},
        {"name": "load", "kind": "perf", "server": "dead", "options": {"num_requests": 3}},
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5}},
        {"name": "fine", "kind": "perf", "server": "ts", "options": {"num_requests": 4, "output_tokens": 2}},
    ], name="mixed")  # fmt: skip
    assert main(["batch", str(path)]) == 3
    out = path.parent / "out" / "mixed"
    names = ("good", "nopy", "oldpy", "badreq", "dead", "load", "ts", "fine")
    status = {n: json.loads((out / n / "status.json").read_text()) for n in names}
    assert status["good"]["status"] == status["fine"]["status"] == status["ts"]["status"] == "ok"
    assert status["nopy"]["status"] == "failed" and "python3.99" in status["nopy"]["error"]
    assert status["oldpy"]["status"] == "failed" and "needs Python 3.10" in status["oldpy"]["error"]
    assert status["badreq"]["status"] == "failed" and "no-such-package-lmmbench-test" in status["badreq"]["error"]
    assert status["dead"]["status"] == "failed" and "exited before it was ready" in status["dead"]["error"]
    assert status["load"]["status"] == "failed" and "serve row 'dead'" in status["load"]["error"]
    # the checks that can run before the plan failed their rows up front, before any row started
    first_start = min(status[n]["started_at_s"] for n in ("good", "fine"))
    assert all((out / n / "status.json").stat().st_mtime <= first_start for n in ("nopy", "oldpy", "badreq"))
    plan = json.loads((out / "plan.json").read_text())
    assert [r["name"] for r in plan["rows"]] == list(names)
    assert (out / "plan_summary.csv").is_file() and (out / "plan_summary.html").is_file()
    report, final = (out / "plan_report.html").read_text(), (out / "final_report.md").read_text()
    for n in ("nopy", "badreq", "dead", "load"):  # each failure with its cause, in both reports
        assert f"<b>{n}</b>: " in report and f"- **{n}** (" in final
    assert "no-such-package-lmmbench-test" in final and "python3.99" in final
    assert "TTFT against load" in report and "<svg" in report  # the perf row that ran is charted
    assert "sample_mc.acc" in final and "ttft_ms_mean" in final  # headlines of the rows that ran
    assert "3 ok, 5 failed" in capsys.readouterr().out


def test_a_perf_row_on_python_3_12_runs_in_its_own_venv(write_plan: Any) -> None:
    path = write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5}},
        {"name": "load", "kind": "perf", "server": "ts", "executor": "venv", "python": "3.12",
         "options": {"num_requests": 5, "output_tokens": 2}},
    ], name="py312")  # fmt: skip
    assert main(["batch", str(path)]) == 0
    out = path.parent / "out" / "py312"
    status = json.loads((out / "load" / "status.json").read_text())
    assert status["status"] == "ok" and status["metrics"]["venv_created"] is True
    run_log = json.loads(next((out / "load").rglob("run.json")).read_text())
    assert run_log["environment"]["python"].startswith("3.12")  # measured by the 3.12 interpreter
    from lmmbench.models.tiny import lmmbench_home

    pth = [p for p in lmmbench_home().glob("venvs/*/lib/python3.12/site-packages/*.pth")]
    assert not any("python3.11" in p.read_text() for p in pth)  # nothing of the driver's 3.11 packages leaks in


def test_an_unreachable_ray_address_is_one_line_within_30_s(
    write_plan: Any, capsys: pytest.CaptureFixture[str]
) -> None:

    from lmmbench.core.net import free_loopback_port

    path = write_plan([{"name": "a", "kind": "eval", "model": "tiny-llm",
                        "options": {"tasks": ["sample_mc"], "limit": 2}}], name="ray_gone")  # fmt: skip
    argv = ["batch", str(path), "--executor", "ray", "--ray-address", f"127.0.0.1:{free_loopback_port()}"]
    # refused before a pacer of 40 fresh CLI imports finishes (it imports ray and reads the plan: a few imports'
    # worth; a connection retried until a timeout would lose the race)
    code, quickly = returns_before_pacer(lambda: main(argv), imports=40)
    assert code == 2 and quickly
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Ray cluster answers there" in err[0]
