"""Plan files: YAML and CSV forms, one clear error per bad row (file, row, field), --dry-run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.executors.plan import load_plan, parse_options
from lmmbench.executors.runner import resolve_plan

CSV_HEAD = "name,kind,model,options,executor,requirements,image\n"


def test_options_text_parses_numbers_lists_and_text() -> None:
    assert parse_options("rate=2.5;num-requests=10;tasks=[\"a\",\"b\"];url=http://h:1/v1") == {
        "rate": 2.5, "num_requests": 10, "tasks": ["a", "b"], "url": "http://h:1/v1"}


def test_csv_plan_resolves_each_kind(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    path.write_text(CSV_HEAD
                    + "ts,serve,,command=testserver;ttft_ms=5,,,\n"
                    + "b,run,tiny-llm,spec=ttft-breakdown;limit=1;repeats=1,subprocess,,\n"
                    + "mc,eval,tiny-llm,tasks=[\"sample_mc\"],,,\n"
                    + "load,perf,,server=ts;num_requests=5,venv,pkg-a;pkg-b==1.0,\n", encoding="utf-8")
    plan = load_plan(path, {"out_dir": tmp_path / "o"})
    assert plan.name == "sweep"
    jobs = {j.name: j for j in resolve_plan(plan)}
    assert set(jobs) == {"b", "mc", "load"}  # the serve row is started by the plan, not a job
    assert jobs["b"].spec == "ttft-breakdown" and jobs["b"].executor == "subprocess"
    assert jobs["b"].config["limit"] == 1 and jobs["b"].config["model"] == "tiny-llm"
    assert jobs["mc"].executor == "inprocess" and jobs["mc"].config["tasks"] == ["sample_mc"]
    assert jobs["load"].requirements == ["pkg-a", "pkg-b==1.0"] and jobs["load"].config["num_requests"] == 5
    assert Path(jobs["load"].row_dir) == (tmp_path / "o" / "sweep" / "load").resolve()


@pytest.mark.parametrize(("line", "message"), [
    ("x,perf,,server=ts;rate=-1,,,", "bad.csv: row 2 'x': options.rate: Input should be greater than 0"),
    ("x,run,tiny-llm,spec=ttft-breakdown;repeatz=3,,,", "row 2 'x': options.repeatz: Extra inputs are not permitted"),
    ("x,run,tiny-llm,limit=1,,,", "row 2 'x': spec: a run row needs spec=<name>"),
    ("x,perf,,server=nope,,,", "row 2 'x': server: 'nope' is not the name of a serve or proxy row"),
    ("x,bench,,,,,", "row 2 'x': kind: Input should be 'run', 'perf', 'eval', 'serve', 'command' or 'proxy'"),
    ("x,perf,,server=ts;rate,,,", "row 2 'x': options: expected key=value, got 'rate'"),
    ("x,perf,,server=ts,warp,,", "bad.csv: row 2 'x': executor: unknown 'warp'"),
    ("ts,perf,,url=http://h:1,,,", "row names must be unique; repeated: ts"),
])  # fmt: skip
def test_bad_row_names_file_row_and_field(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(CSV_HEAD + "ts,serve,,command=testserver,,,\n" + line + "\n", encoding="utf-8")
    with pytest.raises(UserError) as err:
        resolve_plan(load_plan(path))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_serve_options_and_columns(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(CSV_HEAD + "ts,serve,,command=testserver;ttft_ms=-3,,,\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"bad.csv: row 1 'ts': options.ttft_ms"):
        resolve_plan(load_plan(path))
    path.write_text("name,kind,colour\nx,perf,red\n", encoding="utf-8")
    with pytest.raises(UserError, match="columns must be name, kind, model"):
        load_plan(path)


def test_dry_run_prints_resolved_runs_and_runs_nothing(write_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_plan([{"name": "ts", "kind": "serve", "options": {"command": "testserver"}},
                       {"name": "load", "kind": "perf", "server": "ts", "executor": "ray",
                        "options": {"num_requests": 3}}])  # fmt: skip
    assert main(["batch", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ts: serve" in out and "load: perf on ray" in out and '"num_requests": 3' in out
    assert not (path.parent / "out").exists()


def test_cli_bad_plan_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.csv"
    path.write_text(CSV_HEAD + "a,eval,tiny-llm,tasks=[\"sample_mc\"];limit=0,,,\n", encoding="utf-8")
    assert main(["batch", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "p.csv: row 1 'a': options.limit" in err and len(err.splitlines()) == 1


def test_a_row_asking_for_another_python_must_run_in_a_venv(write_plan: Any) -> None:
    path = write_plan([{"name": "load", "kind": "perf", "python": "3.12", "executor": "subprocess",
                        "options": {"url": "http://127.0.0.1:1/v1"}}])  # fmt: skip
    with pytest.raises(UserError, match=r"row 1 'load': python: '3.12' is chosen by the venv executor"):
        resolve_plan(load_plan(path))
    assert resolve_plan(load_plan(path), "venv")[0].python == "3.12"
