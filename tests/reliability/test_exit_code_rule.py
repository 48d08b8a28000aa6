"""The one exit-code rule (docs/reliability.md): 0 all measured, 2 nothing measured, 3 partial, and a plan's
code from its rows; a real plan with one failing row exits 3, one whose every row fails exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.core.exit_codes import measured_exit_code, plan_exit_code

HEAD = "name,kind,model,options,executor,requirements,image\n"


def test_the_rule_itself() -> None:
    assert [measured_exit_code(ok, failed) for ok, failed in ((5, 0), (0, 5), (0, 0), (4, 1))] == [0, 2, 2, 3]
    assert plan_exit_code([]) == 0
    assert plan_exit_code([(False, False), (False, False)]) == 0
    assert plan_exit_code([(True, False), (False, False)]) == 3
    assert plan_exit_code([(True, False), (True, False)]) == 2
    assert plan_exit_code([(True, True), (False, False)]) == 1  # a bug wins over everything


def test_a_plan_with_one_failing_row_exits_3_and_with_every_row_failing_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok_row = 'good,eval,tiny-llm,tasks=["sample_mc"];limit=2;threads=1,inprocess,,\n'
    bad_row = 'bad,eval,tiny-llm,tasks=["no_such_task_anywhere"],inprocess,,\n'
    partial = tmp_path / "partial.csv"
    partial.write_text(HEAD + ok_row + bad_row, encoding="utf-8")
    assert main(["batch", str(partial), "--out-dir", str(tmp_path / "p")]) == 3
    assert "1 ok, 1 failed" in capsys.readouterr().out
    failing = tmp_path / "failing.csv"
    failing.write_text(HEAD + bad_row, encoding="utf-8")
    assert main(["batch", str(failing), "--out-dir", str(tmp_path / "f")]) == 2


def test_resume_of_a_finished_perf_run_says_so_and_measures_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to exit non-zero with "no request succeeded (0 sent)" and rewrite the run's status."""
    import json

    from lmmbench.config.perf.testserver import TestServerConfig
    from lmmbench.core.net import free_loopback_port
    from lmmbench.testing import running_testserver

    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1)) as url:
        argv = ["perf", "--url", url, "--model", "test-model", "--num-requests", "6", "--output-tokens", "2",
                "--no-plots", "--no-progress", "--out-dir", str(tmp_path), "--run-name", "done"]  # fmt: skip
        assert main(argv) == 0
        run = tmp_path / "perf" / "done"
        before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 0
    assert "already finished" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before  # nothing rewritten
    assert json.loads((run / "run.json").read_text())["run"]["status"] == "complete"
