"""LIBERO environment steps in spawned worker processes: steps per second and the term table against W = 0.

    .venv/bin/python benchmarks/libero_env_workers.py [--env libero-object] [--slots 1,4,8] [--workers 0,2,N]
        [--max-steps 10] [--repeats 3] [--out outputs/libero_env_workers.json]

Each point is one ``lmmbench run episodic-eval --env libero-object --policy pi0-tiny`` in a process of its own (N
tasks, one trial each, on N slots, ``--env-workers W``), repeats interleaved over the points (a W above N runs as W
= N, since the scheduler starts at most N workers; N = 1 runs W = 0 only, as episodic-eval steps one slot in its own
process; a point named twice, as W = 2 and a 2-core machine's core count, runs once). From each run's own analysis
(``episodic-eval_analysis.json``, ``run``):

* policy steps per second of the run's wall time (worker start-up, scene builds and resets included, as a user
  waits for them), and environment steps per second of the stepping phase alone (``env_ms``: what the workers
  parallelise);
* the term table: environment steps / scene builds / resets / worker start-up / planner / action expert /
  scheduling, in ms of the wall time;
* one environment step's own time (median; in its worker with W > 0: where workers compete for cores);
* the speed-up against W = 0 at the same N, per repeat (the W = 0 run of the same repeat), median and min..max,
  for both rates.

Around each run: the load average before and after (``/proc/loadavg``; the machine may be shared) and the peak of
the run's memory, sampled every 0.5 s: the RSS summed over the run's process tree (pages shared between processes
counted in each) and the machine's used memory (MemTotal - MemAvailable) above its value before the run. Each run's
output folder and log stay beside ``--out`` (``<out stem>_runs/``). A LIBERO scene holds about 1 GB: N = 8 needs
about 8 GB (in workers or not). Results are written after every run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("env_ms", "env_build_ms", "env_reset_ms", "env_workers_start_ms", "planning_ms", "action_ms",
         "scheduler_ms")

SPREAD = ("steps_per_s", "env_steps_per_s", "wall_s", "process_s", "peak_rss_mb", "env_step_ms", *PARTS)


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3])


def _used_mb() -> float:
    info = {}
    for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
        key, value = line.split(":", 1)
        info[key] = float(value.split()[0]) / 1024
    return info["MemTotal"] - info["MemAvailable"]


def _tree_rss_mb(pid: int) -> float:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


class MemoryPeak:
    """Samples a process tree's summed RSS and the machine's used memory every 0.5 s until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid, self.base_used = pid, _used_mb()
        self.rss_mb = self.used_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self.rss_mb = max(self.rss_mb, _tree_rss_mb(self.pid))
            self.used_mb = max(self.used_mb, _used_mb() - self.base_used)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_point(env: str, n: int, w: int, max_steps: int, out: Path, device: str = "auto",
              timeout_s: float = 3600.0) -> dict[str, Any]:
    """One ``episodic-eval`` run of N tasks x 1 trial on N slots with ``--env-workers W`` (this tree's src/ first on
    the path), its output in ``out``, its log beside it: the rates, the parts of its wall time, load and memory.
    Raises RuntimeError naming the log when the run fails or outlives ``timeout_s``."""
    cmd = [sys.executable, "-m", "lmmbench.cli.main", "run", "episodic-eval", "--env", env, "--policy", "pi0-tiny",
           "--num-tasks", str(n), "--num-trials-per-task", "1", "--num-parallel", str(n), "--env-workers", str(w),
           "--num-steps-wait", "1", "--max-steps", str(max_steps), "--threads", "1", "--warmup", "0",
           "--device", device, "--no-progress", "--out-dir", str(out)]
    pythonpath = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    load_before, t0 = _load(), time.perf_counter_ns()
    log_path = out.parent / f"{out.name}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=pythonpath))
        peak = MemoryPeak(proc.pid)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = 124
        finally:
            peak.stop()
    if rc != 0:
        raise RuntimeError(f"N={n} W={w}: exit {rc}; see {log_path}")
    analysis = json.loads((out / "episodic-eval" / "episodic-eval_analysis.json").read_text(encoding="utf-8"))
    run = analysis["run"]
    wall = run["wall_ms"]
    env_steps = analysis["steps_total"] + n  # one warm-up step per episode (--num-steps-wait 1)
    return {"steps": analysis["steps_total"], "wall_ms": wall, "wall_s": wall / 1000,
            "steps_per_s": analysis["steps_total"] / wall * 1000,
            # the stepping phase alone: env steps per second of the ticks' env time (all slots' steps at once)
            "env_steps_per_s": env_steps / run["env_ms"] * 1000,
            # one env step's own time (in its worker with W > 0), median: contention shows here
            "env_step_ms": (run.get("terms") or {}).get("t_env_ms_per_step", {}).get("median_ms") or 0.0,
            "process_s": (time.perf_counter_ns() - t0) / 1e9, "load_before": load_before, "load_after": _load(),
            "peak_rss_mb": peak.rss_mb, "peak_used_above_start_mb": peak.used_mb,
            **{p: run.get(p) or 0.0 for p in PARTS}}


def grid_points(slots: list[int], workers: list[int]) -> list[tuple[int, int]]:
    """(N, W) per slot count and worker count, W above N run as W = N (the scheduler starts at most N workers),
    each point once, in order; at N = 1 only W = 0 (episodic-eval steps a single slot in its own process whatever
    ``--env-workers`` says)."""
    return list(dict.fromkeys((n, min(w, n)) for n in slots for w in sorted(workers) if n > 1 or w == 0))


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: dict[tuple[int, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per point: medians with min..max of both rates and the parts, and the per-repeat speed-ups against W = 0."""
    table = []
    for (n, w), rows in runs.items():
        row: dict[str, Any] = {"slots": n, "workers": w, "repeats": len(rows),
                               **{k: _spread([r[k] for r in rows]) for k in SPREAD},
                               "loads": [f"{r['load_before']} -> {r['load_after']}" for r in rows]}
        base = {b.get("repeat", i): b for i, b in enumerate(runs.get((n, 0)) or [])}  # W = 0 of the same repeat
        for key in ("steps_per_s", "env_steps_per_s"):
            pairs = [r[key] / base[r.get("repeat", i)][key] for i, r in enumerate(rows) if r.get("repeat", i) in base]
            row[f"speedup_{key}"] = _spread(pairs) if pairs and w else None
        table.append(row)
    return table


def _fmt(s: dict[str, float] | None, digits: int = 2, unit: str = "") -> str:
    if s is None:
        return "-"
    return f"{s['median']:.{digits}f}{unit} ({s['min']:.{digits}f}..{s['max']:.{digits}f})"


def markdown(table: list[dict[str, Any]]) -> str:
    """The table for docs/benchmarks.md."""
    lines = ["| N | W | policy steps/s of the wall | speed-up vs W = 0 | env steps/s of the stepping phase | "
             "speed-up vs W = 0 | one env step's own ms | whole command s | run wall s | env / builds / resets / "
             "worker start-up / planner / action expert / scheduling, s (medians) | peak RSS of the run's processes, "
             "GB | load before -> after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        terms = " / ".join(f"{r[p]['median'] / 1000:.1f}" for p in PARTS)
        lines.append(f"| {r['slots']} | {r['workers']} | {_fmt(r['steps_per_s'])} | "
                     f"{_fmt(r['speedup_steps_per_s'], 2, 'x')} | {_fmt(r['env_steps_per_s'])} | "
                     f"{_fmt(r['speedup_env_steps_per_s'], 2, 'x')} | "
                     f"{_fmt(r.get('env_step_ms'), 0)} | {_fmt(r['process_s'], 0)} | {_fmt(r['wall_s'], 0)} | "
                     f"{terms} | {r['peak_rss_mb']['max'] / 1024:.1f} | {'; '.join(r['loads'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--env", default="libero-object")
    ap.add_argument("--slots", default="1,4,8")
    ap.add_argument("--workers", default=f"0,2,{os.cpu_count() or 1}")
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="outputs/libero_env_workers.json")
    args = ap.parse_args(argv)
    workers = sorted(set(map(int, args.workers.split(","))))
    points = grid_points(list(map(int, args.slots.split(","))), workers)
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {p: [] for p in points}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"args": vars(args), "cores": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                   time.gmtime())}
    run_dir = out.with_name(out.stem + "_runs")  # each run's output and log, kept for a look after
    for r in range(args.repeats):
        for n, w in points:
            try:
                runs[(n, w)].append({**run_point(args.env, n, w, args.max_steps, run_dir / f"n{n}w{w}r{r}"),
                                     "repeat": r})
            except RuntimeError as exc:
                print(f"libero_env_workers: {exc}", file=sys.stderr)
                return 1
            x = runs[(n, w)][-1]
            print(f"repeat {r} N={n} W={w}: {x['steps_per_s']:.2f} steps/s, env {x['env_steps_per_s']:.2f}/s, "
                  f"wall {x['wall_ms'] / 1000:.0f} s, peak RSS {x['peak_rss_mb'] / 1024:.1f} GB, load "
                  f"{x['load_before']} -> {x['load_after']}", flush=True)
            out.write_text(json.dumps({**meta, "runs": {f"{k[0]},{k[1]}": v for k, v in runs.items()}}, indent=1))
    table = summarise(runs)
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    out.write_text(json.dumps({**meta, "table": table, "runs": {f"{n},{w}": v for (n, w), v in runs.items()}},
                              indent=1))
    print(markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
