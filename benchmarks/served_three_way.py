"""The closed loop three ways on the same episodes and seeds (issue 57, point 4):

* ``served-batched``: ``run episodic-eval --policy ws://... --num-parallel N`` against ``lmmbench serve-policy
  --max-batch N --max-wait-ms T`` (N connections; the server batches their requests into one forward);
* ``in-process``: ``run episodic-eval --policy P --num-parallel N`` (the scheduler batches the N slots);
* ``served-serial``: ``run episodic-eval --policy ws://... --num-parallel 1`` against a second server with
  ``--max-batch 1`` (no batching window to wait out): the N episodes one after another, each on a connection of its
  own, as openpi's LIBERO client drives a server.

    .venv/bin/python benchmarks/served_three_way.py [--policy toy] [--env toy-waypoints] [--n 8] [--num-tasks 8]
        [--num-trials-per-task 2] [--max-steps 24] [--repeats 5] [--warmup-rounds 1] [--device cpu] [--threads 1]
        [--max-wait-ms 5]
        [--work outputs/served_three_way] [--out outputs/served_three_way.json]

Both servers are started once (``--python``: the interpreter they run under, this one by default) and kept for
every repeat; the repeats are interleaved (each repeat runs the three ways in turn) so a burst of load on a shared
machine hits one repeat of each, after ``--warmup-rounds`` rounds that are not recorded (measured: the first round
ran 2-10x slower than the next in every way: caches and allocators cold). Each way's time is its run's scheduler
wall time (``run.wall_ms`` of the analysis: the measured episodes, not the process start, the policy build or the
warm-up episode). The speed-ups are over ``served-serial``, taken per repeat (same repeat, same load) and given as
the median with its min–max. The outcomes (each episode's success and steps) must be equal in the three ways and
the actions equal within ``--atol`` (different batch compositions round differently); exit 1 otherwise.
``gpu_check.py --only served`` runs :func:`three_way` on a CUDA machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("served-batched", "in-process", "served-serial")


@contextmanager
def serve_policy(python: str, args: list[str], log: Path, timeout_s: float = 600) -> Iterator[str]:
    """``lmmbench serve-policy ARGS --port 0`` under ``python`` (this tree's src first); yields its ws:// URL once
    it listens; stopped by its pid afterwards. Its output goes to ``log``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([python, "-m", "lmmbench.cli.main", "serve-policy", *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert proc.stdout is not None
        deadline, lines = time.monotonic() + timeout_s, []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "ws://" in line:
                url = "ws://" + line.split("ws://")[1].split()[0]
                break
            if not line and proc.poll() is not None:
                raise RuntimeError(f"serve-policy exited with {proc.returncode}: {''.join(lines)[-600:]}")
        else:
            raise RuntimeError(f"serve-policy did not listen within {timeout_s:.0f} s")
        log.write_text("".join(lines), encoding="utf-8")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run(policy: str, n: int, out: Path, a: argparse.Namespace) -> dict[str, Any]:
    """One ``run episodic-eval`` in this process; its analysis's ``run`` totals and its traces."""
    from lmmbench.cli.main import main as lmmbench_main
    from lmmbench.episodes.compare import read_traces

    argv = ["run", "episodic-eval", "--policy", policy, "--env", a.env, "--num-parallel", str(n),
            "--num-tasks", str(a.num_tasks), "--num-trials-per-task", str(a.num_trials_per_task),
            "--num-steps-wait", "0", "--max-steps", str(a.max_steps), "--warmup", "1", "--seed", str(a.seed),
            "--no-progress",
            "--out-dir", str(out)]  # fmt: skip
    if not policy.startswith("ws://"):
        argv += ["--device", a.device, "--threads", str(a.threads)]
    code = lmmbench_main(argv)
    spec = out / "episodic-eval"
    if code != 0:
        raise RuntimeError(f"run episodic-eval --policy {policy} exited {code}; see {spec}")
    analysis = json.loads((spec / "episodic-eval_analysis.json").read_text(encoding="utf-8"))
    return {"run": analysis["run"], "served": analysis.get("served_policy"),
            "traces": read_traces(spec / "episodic-eval_traces.jsonl")}


def compare_outcomes(runs: dict[str, dict[str, Any]], atol: float) -> dict[str, Any]:
    """Each way's episodes against ``in-process``: keys, success and steps equal; the largest action difference
    (a served trace holds the executed chunk, an in-process one the policy's output: compared on its length)."""
    import numpy as np

    ref = runs["in-process"]["traces"]
    mismatched: dict[str, list[str]] = {}
    worst = 0.0
    for way, run in runs.items():
        bad = sorted(set(ref) ^ set(run["traces"]))
        for key in sorted(set(ref) & set(run["traces"])):
            got, want = run["traces"][key], ref[key]
            if (got.success, got.steps, len(got.trace)) != (want.success, want.steps, len(want.trace)):
                bad.append(key)
                continue
            for x, y in zip(got.trace, want.trace, strict=True):
                g, w = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
                n = min(len(g), len(w))
                if n:
                    worst = max(worst, float(np.max(np.abs(g[:n] - w[:n]))))
        if bad:
            mismatched[way] = bad
    return {"equal": not mismatched and worst <= atol, "mismatched": mismatched, "max_abs_action_diff": worst,
            "atol": atol, "episodes": len(ref)}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(repeats: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per way: wall ms, action batch, served time split (medians, min–max); speed-ups over served-serial."""
    table: dict[str, Any] = {}
    for way in WAYS:
        walls = [r[way]["run"]["wall_ms"] for r in repeats]
        row: dict[str, Any] = {"wall_ms": _spread(walls),
                               "mean_action_batch_per_call": repeats[0][way]["run"]["mean_action_batch_per_call"],
                               "speedup_vs_served_serial": _spread([r["served-serial"]["run"]["wall_ms"]
                                                                    / r[way]["run"]["wall_ms"] for r in repeats])}
        served = [r[way]["served"] for r in repeats if r[way]["served"]]
        if served:
            split = [s["time_split_ms"] for s in served]
            row["calls_per_s"] = _spread([s["calls_per_s"] for s in served])
            row["waiting_for_server_ms"] = _spread([t["waiting_for_server"] for t in split])
            row["inside_server_ms"] = _spread([t["inside_server"] for t in split])
        table[way] = row
    return table


def three_way(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Both servers up, ``a.repeats`` interleaved repeats of the three ways; the summary, the outcome check of
    every repeat and the servers' batch histograms."""
    common = ["--policy", a.policy, "--env", a.env, "--device", a.device, "--threads", str(a.threads),
              "--seed", str(a.seed)]  # fmt: skip
    repeats: list[dict[str, dict[str, Any]]] = []
    checks = []
    with ExitStack() as stack:
        batched = stack.enter_context(serve_policy(
            a.python, [*common, "--max-batch", str(a.n), "--max-wait-ms", str(a.max_wait_ms),
                       "--metrics-out", str(work / "metrics-batched.json")], work / "serve-batched.log"))
        serial = stack.enter_context(serve_policy(
            a.python, [*common, "--max-batch", "1", "--metrics-out", str(work / "metrics-serial.json")],
            work / "serve-serial.log"))
        for rep in range(-a.warmup_rounds, a.repeats):  # rounds < 0: warm-up, unrecorded
            tag = f"r{rep}" if rep >= 0 else f"warmup{-rep}"
            runs = {"served-batched": _run(batched, a.n, work / f"served-batched-{tag}", a),
                    "in-process": _run(a.policy, a.n, work / f"in-process-{tag}", a),
                    "served-serial": _run(serial, 1, work / f"served-serial-{tag}", a)}
            if rep < 0:
                continue
            checks.append(compare_outcomes(runs, a.atol))
            print(f"repeat {rep}: " + ", ".join(f"{w} {runs[w]['run']['wall_ms']:.0f} ms" for w in WAYS),
                  file=sys.stderr, flush=True)
            repeats.append(runs)
    histograms = {name: json.loads((work / f"metrics-{name}.json").read_text())["batch_size_histogram"]
                  for name in ("batched", "serial")}
    return {"per_way": summarise(repeats), "outcomes": checks, "outcomes_equal": all(c["equal"] for c in checks),
            "server_batch_histograms": histograms, "episodes": checks[0]["episodes"]}


def verdicts(check: str, report: dict[str, Any]) -> list[tuple[str, str, bool | None, str]]:
    """``gpu_check.py``'s lines (check, what, PASS / FAIL / None for INFO, numbers): outcomes equal, the server's
    batches > 1, one line per way."""
    checks = report["outcomes"]
    worst = max(c["max_abs_action_diff"] for c in checks)
    bad = {way: keys for c in checks for way, keys in c["mismatched"].items()}
    out: list[tuple[str, str, bool | None, str]] = [
        (check, "outcomes equal in the three ways", report["outcomes_equal"],
         f"{report['episodes']} episodes x {len(checks)} repeats; max |action diff| {worst:.3g} (tol "
         f"{checks[0]['atol']:g})" + (f"; differing episodes {bad}" if bad else ""))]
    hist = report["server_batch_histograms"]["batched"]
    out.append((check, "serve-policy batched the connections", any(int(k) > 1 for k in hist),
                f"batch-size histogram {hist}"))
    for way, t in report["per_way"].items():
        w, x = t["wall_ms"], t["speedup_vs_served_serial"]
        split = (f"; waiting for the server {t['waiting_for_server_ms']['median']:.0f} ms, inside it "
                 f"{t['inside_server_ms']['median']:.0f} ms" if "waiting_for_server_ms" in t else "")
        out.append((f"{check}:{way}", "wall ms", None,
                    f"{w['median']:.0f} ({w['min']:.0f}–{w['max']:.0f}); speed-up over served-serial "
                    f"{x['median']:.2f}x ({x['min']:.2f}–{x['max']:.2f}); action batch per call "
                    f"{t['mean_action_batch_per_call']:.2f}{split}"))
    return out


def parser() -> argparse.ArgumentParser:
    """The script's options (``gpu_check.py`` builds its namespace from these defaults)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="toy")
    ap.add_argument("--env", default="toy-waypoints")
    ap.add_argument("--n", type=int, default=8, help="slots (connections) run at once, and the server's max batch")
    ap.add_argument("--num-tasks", type=int, default=8)
    ap.add_argument("--num-trials-per-task", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup-rounds", type=int, default=1, help="rounds of the three ways run first, unrecorded")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--atol", type=float, default=1e-5, help="largest action difference allowed between the ways")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the two servers")
    ap.add_argument("--work", type=Path, default=Path("outputs/served_three_way"))
    ap.add_argument("--out", type=Path, default=Path("outputs/served_three_way.json"))
    return ap


def table_lines(report: dict[str, Any]) -> list[str]:
    """The markdown table of docs/benchmarks.md."""
    lines = ["| way | wall ms, median (min–max) | speed-up over served-serial, median (min–max) | action batch "
             "per call | waiting for the server ms | inside it ms |", "|---|---|---|---|---|---|"]
    for way, t in report["per_way"].items():
        w, s = t["wall_ms"], t["speedup_vs_served_serial"]
        wait, inside = t.get("waiting_for_server_ms"), t.get("inside_server_ms")
        lines.append(f"| {way} | {w['median']:.0f} ({w['min']:.0f}–{w['max']:.0f}) | {s['median']:.2f} "
                     f"({s['min']:.2f}–{s['max']:.2f}) | {t['mean_action_batch_per_call']:.2f} | "
                     + (f"{wait['median']:.0f} | {inside['median']:.0f} |" if wait else "– | – |"))
    return lines


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from lmmbench.core.environment import capture_environment

    load_before = os.getloadavg()
    report = three_way(a, a.work)
    report |= {"config": {k: str(v) for k, v in vars(a).items()}, "environment": capture_environment(),
               "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count(),
               "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"{report['episodes']} episodes, N = {a.n}, {a.repeats} repeats; load {load_before[0]:.1f} before, "
          f"{report['loadavg_after'][0]:.1f} after; outcomes equal: {report['outcomes_equal']}")
    print("\n".join(table_lines(report)))
    if not report["outcomes_equal"]:
        print(f"the ways differ: {[c for c in report['outcomes'] if not c['equal']]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
