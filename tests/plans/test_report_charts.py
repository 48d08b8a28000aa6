"""final_report.md with its charts as PNG files beside it (VLMHyperBench's ReportGenerator): each chart that
has data is drawn, is a real PNG, and is referenced from the Markdown; a chart without data is not drawn."""

from __future__ import annotations

import re
from pathlib import Path

from lmmbench.reports.plan_charts import ACCURACY_PNG, TTFT_PNG
from lmmbench.reports.plan_report import write_plan_reports

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _images(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)


def test_final_report_charts_exist_and_are_referenced(tmp_path: Path) -> None:
    perf = tmp_path / "load" / "run"
    perf.mkdir(parents=True)
    (perf / "summary.csv").write_text("point,rate,ttft_ms_mean\n0,10,20.5\n1,40,31.0\n", encoding="utf-8")
    rows = [
        {"name": "mc-a", "kind": "eval", "model": "m-a", "status": "ok", "metrics": {"sample_mc.acc": 0.5}},
        {"name": "mc-b", "kind": "eval", "model": "m-b", "status": "ok", "metrics": {"sample_mc.acc": 0.75}},
        {"name": "load", "kind": "perf", "status": "ok", "folder": str(perf), "metrics": {"ttft_ms_mean": 25.0}},
    ]  # fmt: skip
    _, md_path = write_plan_reports(rows, tmp_path, "plan t")
    md = md_path.read_text(encoding="utf-8")
    assert _images(md) == [ACCURACY_PNG, TTFT_PNG]
    for name in _images(md):
        png = md_path.parent / name  # beside the report, referenced relative to it
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 1000


def test_a_chart_without_data_is_not_drawn(tmp_path: Path) -> None:
    rows = [{"name": "mc", "kind": "eval", "model": "m", "status": "ok", "metrics": {"sample_mc.acc": 0.5}},
            {"name": "bad", "kind": "perf", "status": "failed", "error": "down"}]  # fmt: skip
    _, md_path = write_plan_reports(rows, tmp_path, "plan t")
    assert _images(md_path.read_text(encoding="utf-8")) == [ACCURACY_PNG]
    assert not (tmp_path / TTFT_PNG).exists()
