"""The run log: today's layout round-trips, and the three layouts written before it still load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lmmbench.core.errors import UserError
from lmmbench.core.runs.log import RunLog, load_run_log, measurement_from, new_run_id, write_run_log
from lmmbench.core.runs.store import RunStore

FIXTURES = Path(__file__).parent / "fixtures"


def test_spec_v1_layout_loads_with_its_measurement_and_outcome(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "spec_v1_run.json", tmp_path / "run.json")
    (tmp_path / "ttft-breakdown_results.csv").write_text(
        "spec,sample_id,status,ttft_ms,prefill_ms\nttft-breakdown,a,ok,10,4\nttft-breakdown,b,ok,30,6\n"
        "ttft-breakdown,c,error,,\n")  # fmt: skip
    log = load_run_log(tmp_path)
    assert log.legacy_layout == "spec-v1" and log.kind == "spec" and log.name == "ttft-breakdown"
    assert log.model == "tiny-llm" and log.config["repeats"] == 1
    assert log.measurement.timer == "perf_counter_ns" and log.measurement.threads == 1
    assert log.measurement.dtype == "torch.float32" and log.measurement.device == "cpu"
    assert log.outcome.ok == 3 and log.outcome.interrupted is False
    assert log.headline == {"ttft_ms_median": 20.0, "prefill_ms_median": 5.0}  # the error row is left out
    assert log.run["hooks"]["module_paths"]["llm"] == "model"
    assert load_run_log(tmp_path).run_id == log.run_id  # a stable id from the folder


def test_perf_unversioned_layout_loads_with_counts_from_summary(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "perf_v0_run.json", tmp_path / "run.json")
    (tmp_path / "summary.csv").write_text("point,rate,concurrency,requests,ok,errors,qps,ttft_ms_p50\n"
                                          "0,,2,8,7,1,375.8,4.1\n")  # fmt: skip
    log = load_run_log(tmp_path / "run.json")
    assert log.legacy_layout == "perf-v0" and log.kind == "perf" and log.model == "test-model"
    assert log.config["concurrency"] == 2 and log.run["points"] == [{}]
    assert log.outcome.ok == 7 and log.outcome.failed == 1
    assert log.headline["ttft_ms_p50"] == 4.1 and log.headline["errors"] == 1.0
    assert log.environment["libraries"]["lmmbench"] and log.environment["git"]["commit"]
    assert log.measurement.event_loop == "auto"


def test_eval_config_layout_loads_with_accuracy_headline(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "results").mkdir()
    shutil.copy(FIXTURES / "eval_config_all.json", tmp_path / "logs" / "config_all.json")
    (tmp_path / "results" / "sample_mc.json").write_text(json.dumps(
        {"task": "sample_mc", "n_samples": 8, "n_errors": 0, "metrics": {"acc": {"value": 0.25, "stderr": 0.1}}}))
    log = load_run_log(tmp_path)
    assert log.legacy_layout == "eval-config" and log.kind == "eval" and log.model == "tiny-llm"
    assert log.headline == {"sample_mc.acc": 0.25} and log.outcome.ok == 8
    assert log.measurement.threads == 1 and log.measurement.device == "cpu"


def test_write_then_load_round_trips_and_keeps_unknown_measurement_fields(tmp_path: Path) -> None:
    log = RunLog(run_id=new_run_id("perf"), kind="perf", name="r", finished_at="2026-01-01T00:00:00Z",
                 measurement=measurement_from({"timer": "perf_counter_ns", "attention_implementation": "sdpa",
                                               "processor_path": "fast"}),
                 headline={"qps": float("nan"), "ttft_ms_p50": 3.5})  # fmt: skip
    log.measurement.__pydantic_extra__["kv_cache"] = "static"  # another part's field
    write_run_log(tmp_path, log, index=False)
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["schema_version"] == 2 and data["headline"]["qps"] is None  # NaN is written as null
    back = load_run_log(tmp_path)
    assert back.measurement.attention_implementation == "sdpa"
    assert back.measurement.model_extra == {"kv_cache": "static"}
    assert back.headline["ttft_ms_p50"] == 3.5


def test_unknown_and_broken_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"no run\.json"):
        load_run_log(tmp_path)
    (tmp_path / "run.json").write_text("{broken")
    with pytest.raises(UserError, match="cannot read the run log"):
        load_run_log(tmp_path)
    (tmp_path / "run.json").write_text('{"hello": 1}')
    with pytest.raises(UserError, match="not a run log"):
        load_run_log(tmp_path)


def test_store_indexes_filters_and_resolves_prefixes_and_folders(tmp_path: Path) -> None:
    store = RunStore.open(f"sqlite:///{tmp_path / 's.sqlite'}")
    for i, (kind, model) in enumerate([("perf", "m-a"), ("perf", "m-b"), ("spec", "tiny-llm")]):
        log = RunLog(run_id=f"{kind}-2026010{i + 1}-000000-abc{i}", kind=kind, name=f"n{i}", model=model,
                     labels={"team": "x" if i else "y"}, started_at=f"2026-01-0{i + 1}T10:00:00Z",
                     finished_at=f"2026-01-0{i + 1}T11:00:00Z", headline={"qps": float(i)})  # fmt: skip
        store.index(log, tmp_path / f"run{i}")
    assert next(r.run_id for r in store.list()).startswith("spec-20260103")
    assert [r.model for r in store.list(kind="perf")] == ["m-b", "m-a"]
    assert [r.model for r in store.list(model="m-")] == ["m-b", "m-a"]
    assert [r.name for r in store.list(labels={"team": "x"})] == ["n2", "n1"]
    assert [r.name for r in store.list(since="2026-01-02", until="2026-01-02")] == ["n1"]
    assert store.get("perf-20260101").headline == {"qps": 0.0}
    with pytest.raises(UserError, match="matches 2 runs"):
        store.get("perf-")
    with pytest.raises(UserError, match="no run 'nope'"):
        store.get("nope")
    shutil.copy(FIXTURES / "perf_v0_run.json", tmp_path / "run.json")
    assert store.get(str(tmp_path)).run_id.startswith("legacy-perf-")  # a folder is indexed on the fly
    # the same folder indexed again replaces its row
    store.index(RunLog(run_id="perf-x", kind="perf", name="again", finished_at="z"), tmp_path / "run0")
    assert "perf-20260101-000000-abc0" not in [r.run_id for r in store.list()]
