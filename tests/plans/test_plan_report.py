"""The plan's report from row folders written here by hand (numbers chosen by the test): each row's headline
(accuracy, TTFT / throughput, the stage shares of a TTFT breakdown, episodic success and speed-up), the
charts across rows, a link to each row's own report, and each failure with its cause, in both files."""

from __future__ import annotations

import json
from pathlib import Path

from lmmbench.reports.plan_report import row_headline, write_plan_reports


def _folder(root: Path, name: str, headline: dict[str, float], report: bool = True) -> str:
    folder = root / name / "run"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"headline": headline}), encoding="utf-8")
    if report:
        (folder / "report.html").write_text("<html></html>", encoding="utf-8")
    return str(folder)


def test_plan_report_headlines_charts_links_and_failures(tmp_path: Path) -> None:
    perf_dir = _folder(tmp_path, "load", {"ttft_ms_mean": 21.0})
    Path(perf_dir, "summary.csv").write_text("point,rate,ttft_ms_mean\n0,10,20.5\n1,40,31.0\n", encoding="utf-8")
    rows = [
        {"name": "mc-a", "kind": "eval", "model": "m-a", "status": "ok", "folder": _folder(tmp_path, "mc-a", {}),
         "metrics": {"sample_mc.acc": 0.5, "sample_mc.acc_stderr": 0.1, "sample_mc.n_samples": 8}},
        {"name": "mc-b", "kind": "eval", "model": "m-b", "status": "ok", "folder": None,
         "metrics": {"sample_mc.acc": 0.75}},
        {"name": "load", "kind": "perf", "status": "ok", "folder": perf_dir,
         "metrics": {"ttft_ms_mean": 25.75, "qps": 9.5}, "contention": "ran beside row(s) mc-b on h"},
        {"name": "bd", "kind": "run", "status": "ok", "metrics": {}, "folder": _folder(tmp_path, "bd", {
            "ttft_ms_median": 40.0, "visual_encoder_ms_median": 10.0, "prefill_ms_median": 20.0,
            "others_ms_median": 10.0, "preprocess_ms_median": 99.0})},
        {"name": "ep", "kind": "run", "status": "ok", "metrics": {}, "folder": _folder(tmp_path, "ep", {
            "success_rate": 0.8, "speedup_vs_serial_median": 3.5}, report=False)},
        {"name": "broken", "kind": "eval", "status": "failed", "error": "venv setup failed: no-such-pkg"},
    ]  # fmt: skip
    assert row_headline(rows[0]) == {"sample_mc.acc": 0.5}  # stderr and counts are not headlines
    assert row_headline(rows[3]) == {"ttft_ms_median": 40.0, "visual_encoder share": 0.25, "prefill share": 0.5,
                                     "others share": 0.25}  # preprocess runs before generate: not a share of TTFT
    assert row_headline(rows[4]) == {"success_rate": 0.8, "speedup_vs_serial_median": 3.5}
    assert row_headline(rows[5]) == {}
    html_path, md_path = write_plan_reports(rows, tmp_path, "lmmbench plan t")
    page, md = html_path.read_text(), md_path.read_text()
    assert "Accuracy per model and task" in page and "sample_mc.acc · m-a (mc-a): 0.5" in page
    assert "TTFT against load" in page and "load: 40, 31" in page  # from the perf row's summary.csv
    assert "href='mc-a/run/report.html'" in page and "href='ep/run'" in page  # own report, else the folder
    assert "<b>broken</b>: venv setup failed: no-such-pkg" in page
    assert "| load | perf |" in md and "ttft_ms_mean 25.75" in md and "qps 9.5" in md
    assert "- **broken** (eval): venv setup failed: no-such-pkg" in md
    assert "- **load**: ran beside row(s) mc-b on h" in md
    assert "5 of 6 rows ok" in md


def test_a_row_whose_folder_a_later_row_rewrote_is_credited_with_its_own_numbers(tmp_path: Path) -> None:
    # docs/plans/stages.yaml: the score row scores the infer row's predictions in place, rewriting run.json
    shared = _folder(tmp_path, "infer", {"sample_mc.acc": 0.625})
    rows = [
        {"name": "infer", "kind": "eval", "model": "tiny-llm", "status": "ok", "folder": shared,
         "metrics": {"sample_mc.n_samples": 8}, "ended_at_s": 100.0},
        {"name": "score", "kind": "eval", "status": "ok", "folder": shared,
         "metrics": {"sample_mc.acc": 0.625, "sample_mc.n_samples": 8}, "ended_at_s": 200.0},
    ]  # fmt: skip
    from lmmbench.reports.plan_report import folder_owners

    owners = folder_owners(rows)
    assert row_headline(rows[0], owners) == {}  # inference alone scored nothing
    assert row_headline(rows[1], owners) == {"sample_mc.acc": 0.625}
    html_path, md_path = write_plan_reports(rows, tmp_path, "lmmbench plan stages")
    page, md = html_path.read_text(), md_path.read_text()
    assert "sample_mc.acc · score (score): 0.625" in page and "(infer)" not in page.split("Across rows")[1]
    assert "| infer | eval | tiny-llm | ok |  |" in md and "| score | eval |  | ok | sample_mc.acc 0.625 |" in md
