"""LIBERO environment steps in spawned worker processes: steps per second and the term table against W = 0.

    .venv/bin/python benchmarks/libero_env_workers.py [--env libero-object] [--slots 1,4,8] [--workers 0,2,N]
        [--max-steps 10] [--repeats 3] [--out outputs/libero_env_workers.json]

Each point is one ``lmmbench run episodic-eval --env libero-object --policy pi0-tiny`` in a process of its own
(N tasks, one trial each, on N slots, ``--env-workers W``), repeats interleaved over the points. From each run's
analysis: policy steps per second of the run's wall time (scene builds and resets included, as a user waits for
them), environment steps per second of the stepping phase alone (what the workers parallelise), the wall time's
split (environment steps / scene builds / resets / planner / action expert / scheduling)
and the speed-up of steps per second against W = 0 at the same N. Medians with min..max over the repeats.
A LIBERO scene holds about 1 GB: N = 8 needs about 8 GB (in workers or not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PARTS = ("env_ms", "env_build_ms", "env_reset_ms", "planning_ms", "action_ms", "scheduler_ms")


def _one(env: str, n: int, w: int, max_steps: int, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "lmmbench.cli.main", "run", "episodic-eval", "--env", env, "--policy", "pi0-tiny",
           "--num-tasks", str(n), "--num-trials-per-task", "1", "--num-parallel", str(n), "--env-workers", str(w),
           "--num-steps-wait", "1", "--max-steps", str(max_steps), "--threads", "1", "--warmup", "0",
           "--no-progress", "--out-dir", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600)
    analysis = json.loads((out / "episodic-eval" / "episodic-eval_analysis.json").read_text(encoding="utf-8"))
    run = analysis["run"]
    wall = run["wall_ms"]
    env_steps = analysis["steps_total"] + n  # one warm-up step per episode (--num-steps-wait 1)
    return {"steps": analysis["steps_total"], "wall_ms": wall, "steps_per_s": analysis["steps_total"] / wall * 1000,
            # the stepping phase alone: env steps per second of the ticks' env time (all slots' steps at once)
            "env_steps_per_s": env_steps / run["env_ms"] * 1000,
            **{p.removesuffix("_ms") + "_pct": 100.0 * (run.get(p) or 0.0) / wall for p in PARTS}}


def _median(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in runs]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--env", default="libero-object")
    ap.add_argument("--slots", default="1,4,8")
    ap.add_argument("--workers", default=f"0,2,{os.cpu_count() or 1}")
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="outputs/libero_env_workers.json")
    args = ap.parse_args(argv)
    points = [(n, w) for n in map(int, args.slots.split(",")) for w in map(int, args.workers.split(","))
              if w <= n]  # more workers than slots start nothing more
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {p: [] for p in points}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for n, w in points:
                runs[(n, w)].append(_one(args.env, n, w, args.max_steps, Path(tmp) / f"n{n}w{w}r{r}"))
    table = []
    for n, w in points:
        base = statistics.median(x["steps_per_s"] for x in runs[(n, 0)]) if (n, 0) in runs else None
        row = {"slots": n, "workers": w, "steps_per_s": _median(runs[(n, w)], "steps_per_s"),
               "env_steps_per_s": _median(runs[(n, w)], "env_steps_per_s"),
               **{k: statistics.median(x[k] for x in runs[(n, w)]) for k in runs[(n, w)][0] if k.endswith("_pct")}}
        row["speedup_vs_w0"] = row["steps_per_s"]["median"] / base if base else None
        table.append(row)
        s = row["steps_per_s"]
        print(f"N={n} W={w}: {s['median']:.2f} steps/s ({s['min']:.2f}..{s['max']:.2f}), speed-up vs W=0 "
              f"{row['speedup_vs_w0'] or float('nan'):.2f}; env {row['env_pct']:.0f} % build "
              f"{row['env_build_pct']:.0f} % reset {row['env_reset_pct']:.0f} % planner {row['planning_pct']:.0f} % "
              f"action {row['action_pct']:.0f} % scheduling {row['scheduler_pct']:.0f} %")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "table": table, "runs": {f"{n},{w}": v for (n, w), v
                                                                                      in runs.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
