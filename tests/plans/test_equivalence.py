"""A three-row plan (a spec, an eval, a perf against `lmmbench testserver`) gives the same results
under the inprocess, subprocess and ray executors (a real local Ray cluster), and a second run of
the plan skips every finished row."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan

INJECTED_TTFT_MS = 20.0
N_REQUESTS = 40
# Each row asks for every CPU, so Ray runs the rows one at a time as the local executors do and
# the perf row's timing is not disturbed by a model running beside it. The perf row comes first, so
# in-process it runs before the other rows have loaded a model into the same process.
ALL_CPUS = float(os.cpu_count() or 1)


def _rows() -> list[dict[str, Any]]:
    return [
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": INJECTED_TTFT_MS,
                                                    "itl_ms": 5}},
        {"name": "load", "kind": "perf", "server": "ts", "num_cpus": ALL_CPUS,
         "options": {"num_requests": N_REQUESTS, "rate": 25, "arrival": "constant", "warmup_requests": 10,
                     "input_tokens": 16, "output_tokens": 8}},
        {"name": "breakdown", "kind": "run", "spec": "ttft-breakdown", "model": "tiny-llm", "num_cpus": ALL_CPUS,
         "options": {"limit": 1, "repeats": 1, "warmup": 0}},
        {"name": "mc", "kind": "eval", "model": "tiny-llm", "num_cpus": ALL_CPUS, "options": {"tasks": ["sample_mc"]}},
    ]  # fmt: skip


def _check_plan_files(plan_dir: Path) -> None:
    with (plan_dir / "plan_summary.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert [r["name"] for r in table] == ["ts", "load", "breakdown", "mc"]
    assert all(r["status"] == "ok" for r in table)
    assert "<td>sample_mc.acc</td>" not in (plan_dir / "plan_summary.html").read_text()  # a header, not a cell
    assert "<th>sample_mc.acc</th>" in (plan_dir / "plan_summary.html").read_text()
    for name in ("breakdown", "mc", "load"):
        assert json.loads((plan_dir / name / "status.json").read_text())["status"] == "ok"
    assert (plan_dir / "load" / "perf" / "run" / "records.jsonl").is_file()
    assert (plan_dir / "breakdown" / "ttft-breakdown" / "ttft-breakdown_results.csv").is_file()


def test_three_row_plan_same_results_inprocess_subprocess_ray(write_plan: Any, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is part of lmmbench[all], which CI installs")
    path = write_plan(_rows(), name="three")
    results: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    for executor in ("inprocess", "subprocess", "ray"):
        plan = load_plan(path, {"out_dir": tmp_path / executor, "workers": int(ALL_CPUS)})  # num_cpus slots
        t0 = time.perf_counter()
        run = run_plan(plan, executor)
        seconds[executor] = time.perf_counter() - t0
        by_name = {r.name: r for r in run.results}
        assert {n: r.status for n, r in by_name.items()} == dict.fromkeys(("ts", "breakdown", "mc", "load"), "ok"), \
            {n: r.error for n, r in by_name.items()}
        assert {by_name[n].executor for n in ("breakdown", "mc", "load")} == {executor}
        _check_plan_files(run.plan_dir)
        results[executor] = {n: r.metrics for n, r in by_name.items()}
        if executor == "ray":
            import ray

            assert not ray.is_initialized()  # the executor shut down the local cluster it started
    print(f"three-row plan wall time (s): {json.dumps({k: round(v, 1) for k, v in seconds.items()})}; "
          f"perf mean TTFT (ms): {json.dumps({k: round(r['load']['ttft_ms_mean'], 2) for k, r in results.items()})}")
    ref = results["inprocess"]
    eval_ref = {k: v for k, v in ref["mc"].items() if k.startswith("sample_mc.")}
    assert eval_ref["sample_mc.n_samples"] == 24 and "sample_mc.acc" in eval_ref
    for executor, res in results.items():
        assert {k: v for k, v in res["mc"].items() if k.startswith("sample_mc.")} == eval_ref, executor
        spec = res["breakdown"]
        assert (spec["rows"], spec.get("rows_ok"), spec["failed"]) == (ref["breakdown"]["rows"], 1, 0), executor
        assert res["load"]["ok"] == res["load"]["requests"] == N_REQUESTS, executor
    ttft = {executor: res["load"]["ttft_ms_mean"] for executor, res in results.items()}
    assert all(abs(v - INJECTED_TTFT_MS) <= 2.0 for v in ttft.values()), ttft

    again = run_plan(load_plan(path, {"out_dir": tmp_path / "inprocess"}), "inprocess")
    assert again.skipped == ["load", "breakdown", "mc"]
    assert {r.name: r.metrics for r in again.results if r.kind != "serve"} == \
        {n: m for n, m in results["inprocess"].items() if n != "ts"}
