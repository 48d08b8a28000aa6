"""Per-run overhead of the plan executors: the same tiny rows under inprocess, subprocess and ray.

    PYTHONPATH=src .venv/bin/python benchmarks/plan_executor_overhead.py [--rows 10] [--out /tmp/plan_overhead]

Each row is a perf run of 2 requests against one `lmmbench testserver` (TTFT 1 ms), so the row's
own work is a few milliseconds and the wall time per row is mostly the executor's cost. Every row
asks for all CPUs, so Ray runs them one at a time like the local executors. Ray's cluster start
is timed on its own (``ray.init`` before the plan; the executor then joins the running cluster).
Prints one JSON object: per executor the plan's wall time, per-row mean, the row's own ``wall_s``
(time inside ``execute_job``) and the time outside the rows' work per row ((plan - sum of work) /
rows, which includes the test server's start); overheads are differences to ``inprocess``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan


def _write_plan(path: Path, rows: int) -> None:
    import yaml

    cpus = float(os.cpu_count() or 1)
    data = {"name": "overhead", "rows": [
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 1, "itl_ms": 0}},
        *({"name": f"r{i}", "kind": "perf", "server": "ts", "num_cpus": cpus,
           "options": {"num_requests": 2, "concurrency": 1, "output_tokens": 2, "plots": False}}
          for i in range(rows)),
    ]}  # fmt: skip
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


def main() -> None:
    """Run the plan under each executor and print the timings."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("/tmp/plan_overhead"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    plan_path = args.out / "overhead.yaml"
    _write_plan(plan_path, args.rows)
    report: dict[str, dict[str, float]] = {}
    import ray

    for executor in ("inprocess", "subprocess", "ray"):
        if executor == "ray":
            t0 = time.perf_counter()
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
            report["ray_cluster_start"] = {"s": time.perf_counter() - t0}
        plan = load_plan(plan_path, {"out_dir": args.out / executor})
        t0 = time.perf_counter()
        run = run_plan(plan, executor, rerun=True)
        wall = time.perf_counter() - t0
        rows = [r for r in run.results if r.kind == "perf"]
        assert all(r.status == "ok" for r in rows), [r.error for r in rows]
        report[executor] = {"plan_s": wall, "per_row_s": wall / len(rows),
                            "row_work_s_median": statistics.median(r.wall_s or 0.0 for r in rows),
                            "outside_work_per_row_s": (wall - sum(r.wall_s or 0.0 for r in rows)) / len(rows),
                            "first_row_work_s": rows[0].wall_s or 0.0}  # fmt: skip
    ray.shutdown()
    base = report["inprocess"]["per_row_s"]
    for executor in ("subprocess", "ray"):
        report[executor]["overhead_per_row_s"] = report[executor]["per_row_s"] - base
        report[executor]["outside_work_vs_inprocess_s"] = (report[executor]["outside_work_per_row_s"]
                                                          - report["inprocess"]["outside_work_per_row_s"])
    print(json.dumps({k: {n: round(v, 3) for n, v in d.items()} for k, d in report.items()}, indent=2))


if __name__ == "__main__":
    main()
