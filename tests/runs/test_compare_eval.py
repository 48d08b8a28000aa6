"""`runs compare` on two real eval runs of tiny-llm: accuracies compared in points from the per-sample
metrics, identical runs unchanged, and a task only one side ran is named, not compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.core.runs.log import load_run_log
from lmmbench.evaluation import EvalConfig, run_eval
from lmmbench.metrics.compare import compare_metric, confirm, rule_for
from lmmbench.sessions.runs_session import compare_runs


def _eval(out: Path, tasks: list[str]) -> str:
    cfg = EvalConfig.model_validate({"model": "tiny-llm", "tasks": tasks, "limit": 8, "out_dir": out, "threads": 1})
    run = run_eval(cfg, show_progress=False)
    return load_run_log(run.run_dir).run_id


def test_identical_eval_runs_are_unchanged_and_unshared_tasks_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 's.sqlite'}")
    a = _eval(tmp_path / "a", ["sample_mc", "sample_ppl"])
    b = _eval(tmp_path / "b", ["sample_mc"])
    result = compare_runs([a], [b])
    acc = next(m for g, m in result.metrics if g == "sample_mc" and m.metric == "acc")
    assert acc.unit == "pt" and acc.change == 0.0 and acc.verdict == "unchanged" and acc.n_a == acc.n_b == 8
    assert acc.ci_low is not None and acc.ci_high is not None and acc.ci_low <= 0.0 <= acc.ci_high  # per-sample
    assert any("sample_ppl" in n and "only in A" in n for n in result.not_shared)
    assert ("config.tasks", ["sample_mc", "sample_ppl"], ["sample_mc"]) in [
        (k, x, y) for k, x, y in result.config_diff]  # fmt: skip


def test_accuracy_threshold_is_in_points() -> None:
    # 50 % -> 100 % correct on 40 samples per side: +50 points, well past 1 point and outside noise
    res = compare_metric("task.acc", [[0.0, 1.0] * 20], [[1.0] * 40], rule=rule_for("task.acc"))
    assert res.unit == "pt" and res.change == pytest.approx(50.0) and res.verdict == "improvement"
    assert res.ci_low is not None and res.ci_low > 0
    small = compare_metric("task.acc", [[0.0, 1.0] * 20], [[0.0, 1.0] * 20], rule=rule_for("task.acc", {"acc": 5}))
    assert small.verdict == "unchanged" and small.threshold == 5


def test_a_burst_in_one_run_is_not_a_change_but_a_shift_is() -> None:
    base = [20.0 + 0.1 * (i % 5) for i in range(100)]
    burst = [50.0 if 40 <= i < 60 else x for i, x in enumerate(base)]  # 20 slow requests in a row
    found = [compare_metric("ttft_ms", [burst], [base], statistic=s) for s in ("mean", "p50")]
    confirm(found)
    mean, median = found
    assert mean.change == pytest.approx((20.2 / 26.16 - 1) * 100) and median.verdict == "unchanged"
    assert mean.verdict in ("unconfirmed", "unchanged")  # the mean moved, the median did not: not counted
    shifted = [x + 6.0 for x in base]  # every request 6 ms slower
    found = [compare_metric("ttft_ms", [base], [shifted], statistic=s) for s in ("mean", "p50")]
    confirm(found)
    assert [c.verdict for c in found] == ["regression", "regression"]
    assert all(c.ci_low is not None and c.ci_low > 20 for c in found)
