"""Every kind of report page in a real headless Chromium: it renders (a screenshot that is not blank,
with the charts' colours in it), the charts exist and have drawn (SVG paths with data), and the
charts' script ran, and each page answers its question first (its headline elements). Pages come from real
runs: a TTFT breakdown on tiny-llm, an eval run on tiny-llm, an episodic run (toy-waypoints), a two-point
perf run and a comparison of two perf runs against `lmmbench testserver`. With LMMBENCH_SCREENSHOT_DIR set,
the screenshots are kept there (docs/images holds the ones the docs show)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.evaluation import EvalConfig, run_eval
from lmmbench.reports.svg_charts import PALETTE
from lmmbench.testing import running_testserver

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1800"]  # fmt: skip


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("pages")
    mp = pytest.MonkeyPatch()
    mp.setenv("LMMBENCH_STORE_URL", f"sqlite:///{root / 'store.sqlite'}")
    out: dict[str, Path] = {}
    assert main(["run", "ttft-breakdown", "--model", "tiny-llm", "--out-dir", str(root), "--repeats", "2",
                 "--warmup", "0", "--threads", "1", "--no-progress"]) == 0  # fmt: skip
    out["spec"] = root / "ttft-breakdown" / "report.html"
    ev = run_eval(EvalConfig.model_validate({"model": "tiny-llm", "tasks": ["sample_mc"], "limit": 12,
                                             "out_dir": root / "eval", "threads": 1}), show_progress=False)
    out["eval"] = ev.run_dir / "report.html"
    assert main(["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "2", "--out-dir", str(root),
                 "--threads", "1", "--no-progress", "--compare-serial", "--compare-repeats", "5"]) == 0  # fmt: skip
    out["episodic"] = root / "episodic-eval" / "report.html"
    for name, ttft in (("a", 5), ("b", 8)):
        with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=ttft, itl_ms=1)) as url:
            assert main(["perf", "--url", url, "--model", "test-model", "--concurrencies", "1,4", "--num-requests",
                         "20", "--input-tokens", "16", "--output-tokens", "4", "--no-plots", "--no-progress",
                         "--out-dir", str(root), "--run-name", name]) == 0  # fmt: skip
    out["perf"] = root / "perf" / "a" / "report.html"
    out["compare"] = root / "compare.html"
    assert main(["runs", "report", str(root / "perf" / "a"), str(root / "perf" / "b"), "--out",
                 str(out["compare"])]) == 0  # fmt: skip
    yield out
    mp.undo()


def _render(page: Path, tmp: Path) -> tuple[str, Path]:
    if CHROMIUM is None:
        if os.environ.get("CI"):  # CI's setup installs it: a missing browser there is a failure, not a skip
            pytest.fail("chromium is not installed although CI's scripts/setup.sh should have installed it")
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    shot = tmp / "shot.png"
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--screenshot={shot}",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, shot


#: what each page must show in its headline, before its first chart (the question it answers, first)
HEADLINE_ELEMENTS = {
    "spec": ("<b>TTFT ", "Where TTFT goes:", "prefill ", " %"),  # tiny-llm: text only, no encoders
    "eval": ("sample_mc · acc", "95 % "),
    "episodic": ("success rate", "95 % ", "episodes", "speed-up vs serial"),  # its spread, or "not reported"
    "perf": ("qps",),
    "compare": (),
}


@pytest.mark.parametrize("kind", ["spec", "eval", "episodic", "perf", "compare"])
def test_page_renders_with_drawn_charts(pages: dict[str, Path], kind: str, tmp_path: Path) -> None:
    from PIL import Image

    page = pages[kind]
    assert page.is_file()
    assert not re.search(r"(src|href)=['\"](?!data:)", page.read_text(encoding="utf-8"))  # nothing from the network
    dom, shot = _render(page, tmp_path)
    assert "id=\"chart-tip\"" in dom  # the charts' script ran
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", dom, flags=re.S)
    assert charts, "no chart on the page"
    for chart in charts:
        marks = re.findall(r"<path class=\"mark\"[^>]* d=\"([^\"]+)\"", chart)
        assert marks and all(len(d) > 8 for d in marks), chart[:300]
    assert "Headline" in dom and "<table" in dom  # headline first, tables after
    assert dom.index("Headline") < dom.index("class=\"chart\"") < dom.rindex("<table")
    colors = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24) or []
    assert len(colors) > 50, "the screenshot is (nearly) blank"
    blue = tuple(int(PALETTE[0][i : i + 2], 16) for i in (1, 3, 5))
    drawn = sum(n for n, px in colors if sum(abs(a - b) for a, b in zip(px, blue, strict=True)) < 30)
    assert drawn > 200, "no chart colour in the screenshot"
    top = dom[: dom.index("class=\"chart\"")]
    assert all(e in top for e in HEADLINE_ELEMENTS[kind]), (kind, top[-1500:])
    if kind == "spec":  # the stacked bar per input is the first chart; raw field names only further down
        assert "aria-label=\"stage breakdown per input\"" in dom[dom.index("class=\"chart\"") - 200:][:400]
        assert "_ms_median" not in top and "others_generate_setup" not in top
    visible = re.sub(r"<[^>]+>", " ", top)  # the text a reader sees (raw keys stay in tooltips and tables)
    raw = re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)*_(?:ms|s)(?:_(?:median|mean|p\d+))?\b|\bspeedup_vs_serial\w*", visible)
    assert not raw or kind == "compare", (kind, raw)  # a comparison names the metrics it compares
    assert "95 % -" not in visible, "an accuracy interval below 0"
    if kind == "episodic":  # the answer first: success rate, then the speed-up with its spread, then timings
        assert visible.index("success rate") < visible.index("speed-up vs serial") < visible.index("wall time")
    keep = os.environ.get("LMMBENCH_SCREENSHOT_DIR")
    if keep and kind in ("spec", "eval", "episodic"):
        shutil.copy(shot, Path(keep) / f"report-{ {'spec': 'ttft-breakdown'}.get(kind, kind)}.png")
