"""report.html after a short real `lmmbench run` and `lmmbench perf`: present, holds the numbers, escapes."""

from __future__ import annotations

import csv
import json
import logging
import re
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.reports.html_report import format_value, write_reports
from lmmbench.testing import running_testserver

EVIL = "<script>alert('x')</script>&\"q"



def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _assert_escaped(page: str) -> None:
    assert "<script>" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;&quot;q" in page
    assert page.count("<script") == 1 and "<script id='lmmbench-charts'>" in page  # only the charts' own


def _assert_self_contained(page: str, n_images: int) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert len(re.findall(r"src='data:image/png;base64,[A-Za-z0-9+/=]{100,}'", page)) == n_images
    assert not re.search(r"(src|href)=['\"](?!data:)", page)  # nothing loaded from elsewhere


def test_perf_run_writes_report_html_with_every_point_and_escapes_model_and_labels(tmp_path: Path) -> None:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=0.5, model=EVIL)) as url:
        assert main(["perf", "--url", url, "--model", EVIL, "--concurrencies", "1,4", "--num-requests", "16",
                     "--input-tokens", "16", "--output-tokens", "8", "--labels", f"note={EVIL}",
                     "--out-dir", str(tmp_path), "--run-name", "r"]) == 0  # fmt: skip
    run = tmp_path / "perf" / "r"
    page = (run / "report.html").read_text(encoding="utf-8")
    _assert_escaped(page)
    pngs = sorted(p.name for p in run.glob("*.png"))
    assert pngs == ["latency_cdf.png", "load_curves.png", "ttft_vs_input.png"]
    _assert_self_contained(page, len(pngs))
    summary = _rows(run / "summary.csv")
    assert len(summary) == 2
    for row in summary:
        for key in ("qps", "ttft_ms_p99", "output_token_throughput", "requests"):
            assert f">{format_value(row[key])}<" in page, key
    assert page.count("<h2>") >= 4  # summary, plots, config, environment


def test_spec_run_writes_report_html_with_summary_fits_and_plot(tmp_path: Path) -> None:
    assert main(["run", "ttft-breakdown", "--model", "tiny-llm", "--out-dir", str(tmp_path), "--repeats", "1",
                 "--warmup", "0", "--threads", "1", "--no-progress"]) == 0  # fmt: skip
    spec_dir = tmp_path / "ttft-breakdown"
    page = (spec_dir / "report.html").read_text(encoding="utf-8")
    _assert_self_contained(page, 1)
    assert "lmmbench run ttft-breakdown: tiny-llm" in page
    overall = [r for r in _rows(spec_dir / "ttft-breakdown_summary.csv") if r["level"] == "all"]
    ttft = next(r for r in overall if r["field"] == "ttft_ms")
    assert f">{format_value(ttft['p50'])}<" in page and f">{format_value(ttft['mean'])}<" in page
    analysis = json.loads((spec_dir / "ttft-breakdown_analysis.json").read_text())
    for key, fit in analysis["fits"].items():
        assert f">{key}<" in page and f">{format_value(fit['slope_ms_per_unit'])}<" in page
    run = json.loads((spec_dir / "run.json").read_text())
    assert f">{run['environment']['python']}<" in page  # environment from run.json

    # a hostile model name and sample id in the files are escaped when the page is rebuilt from them
    run["config"]["model"] = EVIL
    (spec_dir / "run.json").write_text(json.dumps(run))
    rows = _rows(spec_dir / "ttft-breakdown_summary.csv")
    rows[-1]["key"] = EVIL
    with (spec_dir / "ttft-breakdown_summary.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert write_reports("spec", spec_dir, "ttft-breakdown") == [spec_dir / "report.html"]
    page = (spec_dir / "report.html").read_text(encoding="utf-8")
    _assert_escaped(page)
    assert page.count("&lt;script&gt;") >= 3  # title, header, config, summary row


def test_a_report_that_cannot_be_written_is_a_warning_not_a_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "run.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert write_reports("perf", tmp_path) == []
    assert "could not write its report" in caplog.text
    assert not (tmp_path / "report.html").exists()
