"""Stages: the worked example of docs/plans.md (inference on the subprocess executor, scoring of its
predictions in an isolated venv, a command row collecting the scores) gives the scores of `eval --mode all`;
a failed row skips the rows that need it (and theirs), naming it; unknown needs, cycles and hand-offs from
rows not needed are refused before anything runs; a command row fails when a declared output is missing; a row
starts when its needs end (subprocess, container, subprocess + inprocess, inprocess), by the order of events."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.executors.plan import load_plan
from lmmbench.executors.runner import run_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "plans" / "stages.yaml"


def test_two_stage_example_gives_the_scores_of_mode_all(tmp_path: Path) -> None:
    from lmmbench.evaluation.eval_config import EvalConfig
    from lmmbench.evaluation.modes import run_eval

    run = run_plan(load_plan(EXAMPLE, {"out_dir": tmp_path / "plans"}))
    res = {r.name: r for r in run.results}
    assert [res[n].status for n in ("infer", "score", "collect")] == ["ok"] * 3, {n: r.error for n, r in res.items()}
    assert res["score"].executor == "venv" and res["score"].metrics["venv_isolation"] == "isolated"
    assert res["score"].folder == res["infer"].folder  # it scored the infer row's predictions, in place
    assert not any(k.startswith("sample_mc.acc") for k in res["infer"].metrics)  # infer alone scores nothing
    ref = run_eval(EvalConfig(model="tiny-llm", tasks=["sample_mc"], mode="all", out_dir=tmp_path / "all",
                              threads=1), show_progress=False)  # fmt: skip
    want = {f"{r['task']}.{m}": v["value"] for r in ref.results for m, v in r["metrics"].items()}
    got = {k: v for k, v in res["score"].metrics.items() if k in want}
    assert got == want and want  # the same predictions scored the same way: equal, not close
    with (tmp_path / "plans" / "stages" / "collect" / "scores" / "summary.csv").open() as fh:
        assert any(row.get("task") == "sample_mc" for row in csv.DictReader(fh))
    # the plan report credits each row with its own numbers: the score row's accuracy is not the infer row's
    # (scoring rewrote the run.json of the folder they share), and its bars are drawn once
    md = Path(run.report_md).read_text(encoding="utf-8")
    infer_line = next(ln for ln in md.splitlines() if ln.startswith("| infer |"))
    score_line = next(ln for ln in md.splitlines() if ln.startswith("| score |"))
    assert "sample_mc.acc" not in infer_line and f"sample_mc.acc {want['sample_mc.acc']:.4g}" in score_line
    page = Path(run.report_html).read_text(encoding="utf-8")
    assert "(score): " in page and "(infer): " not in page


def _cmd(name: str, command: str, needs: list[str] | None = None, **options: Any) -> dict[str, Any]:
    return {"name": name, "kind": "command", "needs": needs or [], "options": {"command": command, **options}}


def test_failed_row_skips_its_dependants_with_the_cause(write_plan: Any) -> None:
    path = write_plan([
        _cmd("broken", "false"),
        _cmd("after", "true", ["broken"]),
        _cmd("later", "true", ["after"]),
        _cmd("fine", "true"),
        _cmd("fine2", "true", ["fine"]),
    ], name="skip", executor="subprocess")  # fmt: skip
    assert main(["batch", str(path)]) == 3
    out = path.parent / "out" / "skip"
    status = {n: json.loads((out / n / "status.json").read_text()) for n in ("broken", "after", "later", "fine2")}
    assert status["broken"]["status"] == "failed" and "exited with code 1" in status["broken"]["error"]
    assert status["after"]["status"] == "skipped"
    assert status["after"]["error"].startswith("needs row 'broken', which failed")
    assert status["later"]["status"] == "skipped" and status["later"]["error"].startswith("needs row 'after', "
                                                                                         "which skipped")
    assert status["fine2"]["status"] == "ok"
    report = (out / "final_report.md").read_text(encoding="utf-8")
    assert "## Skipped" in report and "- **after** (command): needs row 'broken', which failed" in report


@pytest.mark.parametrize(("rows", "message"), [
    ([_cmd("a", "true", ["nope"])], "row 1 'a': needs: 'nope' is not the name of a row of this plan"),
    ([_cmd("a", "true", ["b"]), _cmd("b", "true", ["c"]), _cmd("c", "true", ["a"])],
     "needs: the rows a -> b -> c -> a need each other in a cycle"),
    ([_cmd("a", "true"), _cmd("b", "ls {rows.a.folder}")], "row 2 'b': options: {rows.a...} reads row 'a', which "
                                                          "is not among this row's needs"),
    ([_cmd("a", "true", ["a"])], "row 1 'a': needs: a row cannot need itself"),
])  # fmt: skip
def test_unknown_needs_cycles_and_unneeded_handoffs_refused_before_anything_runs(
        write_plan: Any, capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]], message: str) -> None:
    path = write_plan(rows, name="bad")
    assert main(["batch", str(path)]) == 2
    assert message in capsys.readouterr().err
    assert not (path.parent / "out" / "bad").exists()


def test_command_row_declared_outputs_and_handoff(write_plan: Any) -> None:
    path = write_plan([
        _cmd("make", "sh -c 'echo 42 > {out_dir}/weights.txt'", outputs=["weights.txt"]),
        _cmd("lazy", "true", outputs=["never.txt"]),
        _cmd("use", "cp {rows.make.out_dir}/weights.txt {out_dir}/copy.txt", ["make"], outputs=["copy.txt"]),
    ], name="cmd", executor="subprocess")  # fmt: skip
    res = {r.name: r for r in run_plan(load_plan(path)).results}
    assert res["make"].status == "ok" and res["use"].status == "ok", res
    assert (path.parent / "out" / "cmd" / "use" / "copy.txt").read_text() == "42\n"
    assert res["lazy"].status == "failed" and "did not write its declared output(s): never.txt" in (
        res["lazy"].error or "")


@pytest.mark.parametrize("executor", ["subprocess", "container", "mixed"],
                         ids=["subprocess", "container_fake_engine", "subprocess_and_inprocess"])
def test_a_row_starts_when_its_needs_end_not_after_an_unrelated_slow_row(write_plan: Any, tmp_path: Path,
                                                                        executor: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Order of events, no clock: 'slow' ends only once 'after' (which needs 'mid', which needs the quick 'first')
    has written its mark, so in waves 'slow' would wait for ever (here: fail after 60 s) while 'after' waits for
    it. Mixed: 'mid' runs in the driver (inprocess) between two subprocess rows, the hand-off crossing executors
    both ways while the subprocess executor runs."""
    mark = tmp_path / "after-ran"
    wait = tmp_path / "wait.py"
    wait.write_text(f"import pathlib, sys, time\nm, t = pathlib.Path({str(mark)!r}), time.monotonic()\n"
                    "while not m.exists() and time.monotonic() - t < 60:\n    time.sleep(0.05)\n"
                    "sys.exit(0 if m.exists() else 1)\n")
    rows = [_cmd("slow", f"{{python}} {wait}"), _cmd("first", "true"), _cmd("mid", "true", ["first"]),
            _cmd("after", f"touch {mark}", ["mid"])]
    if executor == "container":  # the fake engine (no container engine is mocked beyond its argv: it runs on the host)
        fake = Path(__file__).parent / "fake_engine.py"
        monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {fake}")
        monkeypatch.setenv("FAKE_ENGINE_LOG", str(tmp_path / "engine.log"))
        rows = [{**r, "image": "lmmbench:test"} for r in rows]
    if executor == "mixed":
        rows[2]["executor"], executor = "inprocess", "subprocess"
    path = write_plan(rows, name="order", executor=executor, workers=2)
    assert main(["batch", str(path)]) == 0
    out = path.parent / "out" / "order"
    st = {n: json.loads((out / n / "status.json").read_text()) for n in ("slow", "first", "mid", "after")}
    assert all(s["status"] == "ok" for s in st.values()), st
    assert st["after"]["started_at_s"] < st["slow"]["ended_at_s"]
    assert st["first"]["ended_at_s"] <= st["mid"]["started_at_s"] and st["mid"]["ended_at_s"] <= st["after"][
        "started_at_s"]
    assert [st[n]["executor"] for n in ("first", "mid")] == [executor, rows[2].get("executor", executor)]


def test_an_inprocess_row_starts_when_its_needs_end_before_a_later_unrelated_row(write_plan: Any) -> None:
    """The driver runs one row at a time: once 'first' ended, 'after' (which needs it) is the first row in plan
    order whose needs have ended, so it starts before 'late'; in waves 'late' (no needs) ran with 'first', before
    'after'. Order of events: each row's start against the others' ends."""
    path = write_plan([_cmd("first", "true"), _cmd("after", "true", ["first"]), _cmd("late", "true")], name="inp")
    res = {r.name: r for r in run_plan(load_plan(path)).results}
    assert all(r.status == "ok" and r.executor == "inprocess" for r in res.values()), res
    first, after, late = res["first"], res["after"], res["late"]
    assert first.ended_at_s <= after.started_at_s and after.ended_at_s <= late.started_at_s  # type: ignore[operator]
