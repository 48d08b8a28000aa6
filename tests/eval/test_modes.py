"""`lmmbench eval` modes all / infer / eval on the real tiny models: layout, resume, failures, groups."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.evaluation import EvalConfig, run_eval


def _cfg(tmp: Path, **kw: Any) -> EvalConfig:
    base: dict[str, Any] = {"model": "tiny-llm", "tasks": ["sample_mc", "sample_ppl"], "out_dir": tmp, "threads": 1}
    base.update(kw)
    return EvalConfig.model_validate(base)


def test_all_mode_writes_the_aisbench_layout_and_group_pivots(tmp_path: Path) -> None:
    run = run_eval(_cfg(tmp_path, limit=8, group_by=["id"]), show_progress=False)
    d = run.run_dir
    assert d.parent == tmp_path
    for sub in ("logs", "predictions", "results", "summary"):
        assert (d / sub).is_dir()
    preds = [json.loads(x) for x in (d / "predictions" / "sample_mc.jsonl").read_text().splitlines()]
    assert len(preds) == 8 and all(len(p["loglikelihoods"]) == len(p["choices"]) for p in preds)
    with (d / "results" / "sample_mc_metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 8 and {"doc_id", "subject", "acc", "acc_norm"} <= set(rows[0])
    acc = sum(float(r["acc"]) for r in rows) / 8
    result = json.loads((d / "results" / "sample_mc.json").read_text())
    assert result["metrics"]["acc"]["value"] == pytest.approx(acc)
    pivot = list(csv.DictReader((d / "summary" / "sample_mc_by_subject.csv").open()))
    assert sum(int(r["n"]) for r in pivot) == 8
    by_id = list(csv.DictReader((d / "summary" / "sample_mc_by_id.csv").open()))  # --group-by adds a column
    assert len(by_id) == 8 and all(int(r["n"]) == 1 for r in by_id)
    md = (d / "summary" / "summary.md").read_text()
    assert "| sample_ppl | word_perplexity |" in md and "## sample_mc by subject" in md
    assert (d / "logs" / "all.log").read_text().count("infer sample_") == 2


def test_infer_then_resume_then_eval(tmp_path: Path) -> None:
    first = run_eval(_cfg(tmp_path, mode="infer", limit=6), show_progress=False)
    pred = first.run_dir / "predictions" / "sample_mc.jsonl"
    lines = pred.read_text().splitlines()
    # simulate a run killed after 3 samples, with a half-written last line
    pred.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    again = run_eval(_cfg(tmp_path, mode="infer", limit=6, resume="latest"), show_progress=False)
    assert again.run_dir == first.run_dir
    mc = next(s for s in again.infer if s["task"] == "sample_mc")
    assert (mc["skipped"], mc["done"]) == (3, 3)
    ppl = next(s for s in again.infer if s["task"] == "sample_ppl")
    assert (ppl["skipped"], ppl["done"]) == (6, 0)
    scored = run_eval(_cfg(tmp_path, mode="eval", limit=6, resume="latest", model=None), show_progress=False)
    mc_res = next(r for r in scored.results if r["task"] == "sample_mc")
    assert mc_res["n_samples"] == 6 and mc_res["n_errors"] == 0
    # the resumed numbers equal a fresh run's
    fresh = run_eval(_cfg(tmp_path / "fresh", limit=6), show_progress=False)
    fresh_mc = next(r for r in fresh.results if r["task"] == "sample_mc")
    assert fresh_mc["metrics"] == mc_res["metrics"]


def test_a_longer_limit_resumes_a_shorter_run(tmp_path: Path) -> None:
    run_eval(_cfg(tmp_path, tasks=["sample_mc"], mode="infer", limit=3), show_progress=False)
    again = run_eval(_cfg(tmp_path, tasks=["sample_mc"], limit=5, resume="latest"), show_progress=False)
    assert (again.infer[0]["skipped"], again.infer[0]["done"]) == (3, 2)
    assert again.results[0]["n_samples"] == 5


def test_eval_mode_needs_a_run_and_a_failing_sample_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", "--tasks", "sample_mc", "--mode", "eval", "--out-dir", str(tmp_path)])
    assert code == 2 and "--resume" in capsys.readouterr().err
    # a VQA task whose second image is missing: that sample fails, the others are scored
    data = tmp_path / "vqa.jsonl"
    src = Path(__file__).resolve().parents[2] / "src/lmmbench/evaluation/tasks/data"
    rows = [json.loads(x) for x in (src / "sample_vqa.jsonl").read_text().splitlines()[:3]]
    rows[1]["image"] = "images/does_not_exist.png"
    for r in rows:
        r["image"] = str(src / r["image"])
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = tmp_path / "vqa.yaml"
    task.write_text(
        (src.parent / "sample_vqa.yaml")
        .read_text()
        .replace("data/sample_vqa.jsonl", str(data))
        .replace("task: sample_vqa", "task: vqa_broken")
    )
    run = run_eval(_cfg(tmp_path, model="tiny-vl", tasks=[str(task)]), show_progress=False)
    res = run.results[0]
    assert res["n_samples"] == 3 and res["n_errors"] == 1 and res["metrics"]["acc"]["n"] == 2
    preds = [json.loads(x) for x in (run.run_dir / "predictions" / "vqa_broken.jsonl").read_text().splitlines()]
    assert sum(1 for p in preds if p["error"] and "does_not_exist" in p["error"]) == 1


def test_cli_tasks_and_bad_task_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "sample_mc" in out and "multiple_choice" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: bad\nkind: generate\ndata:\n  path: nope.jsonl\n  colour: red\n")
    code = main(["eval", "--model", "tiny-llm", "--tasks", str(bad), "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "bad.yaml:5: field 'data.colour'" in err
