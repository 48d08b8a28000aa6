"""Repeat noise: CV per stage, the order-statistic 95 % CI of the median, --target-ci-pct, attention in run.json."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.metrics.noise import ci_half_width_pct, cv_pct, median_ci, noise_warnings, repeat_noise
from lmmbench.specs.base import Case, RunOptions, Spec, SpecContext
from lmmbench.specs.runner import UnifiedRunner


def test_median_ci_is_the_textbook_order_statistic_interval() -> None:
    # Binomial(n, 1/2): n=10 -> (x(2), x(9)) covers 97.9 %, (x(3), x(8)) only 89.1 %
    assert median_ci([float(v) for v in range(10, 0, -1)]) == (2.0, 9.0)
    assert median_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)  # 96.9 %
    assert median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # min..max covers 93.75 % < 95 %
    assert ci_half_width_pct([1.0, 2.0, 3.0, 4.0, 5.0]) is None


def test_cv_is_sample_std_over_mean() -> None:
    assert cv_pct([9.0, 10.0, 11.0]) == pytest.approx(10.0)
    assert cv_pct([5.0]) is None


def test_noise_warnings_name_the_noisy_stage_and_skip_negligible_ones() -> None:
    rows = [{"status": "ok", "sample_id": "a", "ttft_ms": t, "prefill_ms": p, "others_cache_setup_ms": o}
            for t, p, o in ((100, 60, 0.1), (101, 40, 0.3), (99, 80, 0.05))]
    noise = repeat_noise(rows, ["ttft_ms", "prefill_ms", "others_cache_setup_ms"])
    assert noise["per_field"]["prefill_ms"]["cv_pct_max"] == pytest.approx(33.33, abs=0.01)
    lines = noise_warnings(noise, "ttft_ms")
    assert len(lines) == 1 and lines[0].startswith("prefill_ms: CV of repeats up to 33.3 %")


class _ScriptedSpec(Spec):
    """Stands in for a model: each case's ttft_ms follows a fixed script (known ground truth)."""

    name = "scripted"

    def __init__(self, scripts: dict[str, list[float]]) -> None:
        self.scripts = {k: iter(v) for k, v in scripts.items()}

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        return {"ttft_ms": next(self.scripts[case.id])}


def test_target_ci_repeats_until_the_median_is_precise_or_max_repeats(tmp_path: Path) -> None:
    steady = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 100.1, 99.9]  # within 1 % from 6 repeats on
    noisy = [50.0, 150.0] * 10
    rows: list[dict[str, Any]] = []
    spec = _ScriptedSpec({"steady": steady, "noisy": noisy})
    runner = UnifiedRunner(spec, SpecContext(options=RunOptions(), spec_dir=tmp_path), rows.append)
    stats = runner.run([Case("steady"), Case("noisy")], repeats=3, warmup=0, progress=False,
                       target_ci_pct=2.0, max_repeats=10)
    per_case = {c: [r["ttft_ms"] for r in rows if r["sample_id"] == c] for c in ("steady", "noisy")}
    assert len(per_case["steady"]) == 6  # the first n whose CI exists (n >= 6) is already within 2 %
    assert ci_half_width_pct(per_case["steady"]) <= 2.0
    assert len(per_case["noisy"]) == 10 and stats.ci_not_reached == ["noisy"]
    assert stats.extra_repeats == 3 + 7
    assert [r["repeat"] for r in rows if r["sample_id"] == "noisy"] == list(range(10))


def test_breakdown_run_records_attention_precision_and_noise(tmp_path: Path) -> None:
    code = main(["run", "ttft-breakdown", "--model", "tiny-vl", "--limit", "1", "--repeats", "6", "--warmup", "0",
                 "--attn-implementation", "eager", "--threads", "1", "--no-progress", "--out-dir", str(tmp_path)])
    assert code == 0
    spec_dir = tmp_path / "ttft-breakdown"
    run = json.loads((spec_dir / "run.json").read_text())
    assert run["run"]["attention"]["requested"] == "eager"
    assert run["run"]["attention"]["in_use"]["vision"] == "eager"
    assert run["run"]["attention"]["in_use"]["text"] == "eager"
    assert run["run"]["matmul_precision"]["float32_matmul_precision"] in ("highest", "high", "medium")
    assert run["measurement"]["random_weights"] is False
    summary = list(csv.DictReader((spec_dir / "ttft-breakdown_summary.csv").open()))
    ttft = next(r for r in summary if r["level"] == "sample" and r["field"] == "ttft_ms")
    assert float(ttft["median_ci95_low"]) <= float(ttft["p50"]) <= float(ttft["median_ci95_high"])
    assert float(ttft["cv_pct"]) > 0
    assert all(r["cv_pct"] == "" for r in summary if r["level"] != "sample")
    analysis = json.loads((spec_dir / "ttft-breakdown_analysis.json").read_text())
    assert analysis["repeat_noise"]["per_sample"][ttft["key"]]["ttft_ms"]["n"] == 6
