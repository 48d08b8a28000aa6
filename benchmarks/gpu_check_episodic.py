"""The episodic part of benchmarks/gpu_check.py: LIBERO scenes in ``--env-workers`` worker processes.

On LIBERO-Object with ``pi0-tiny`` (N tasks x 1 trial on N slots; benchmarks/libero_env_workers.py runs each
point), at N = 1, 4, 8 and W = 0, 2 and the machine's core count (W above N runs as W = N), repeats interleaved: one
INFO line per point with policy steps per second of the run's wall time and environment steps per second of the stepping
phase, each with its speed-up against W = 0 at the same N (median and min..max over the repeats), the worker
start-up apart, the wall time's parts, the memory peak and the load. A run that fails is a FAIL naming its log; the
whole part is a SKIP, with the reason, where LIBERO, mujoco or robosuite cannot be imported (the lent GPU image has
none of them). ``--cpu-smoke``: N = 2, W = 0 and 2, one repeat, 2 policy steps per episode.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NEEDS = ("libero", "mujoco", "robosuite")
CHECK = "libero-workers"


@dataclass
class Grid:
    """The points and repeats of one mode."""

    slots: tuple[int, ...]
    workers: tuple[int, ...]
    repeats: int
    max_steps: int


def grid(cpu_smoke: bool, cores: int | None = None) -> Grid:
    """N = 1, 4, 8 x W = 0, 2, cores (3 repeats, 10 steps), or the tiny CPU grid."""
    if cpu_smoke:
        return Grid(slots=(2,), workers=(0, 2), repeats=1, max_steps=2)
    return Grid(slots=(1, 4, 8), workers=tuple(sorted({0, 2, cores or os.cpu_count() or 1})), repeats=3,
                max_steps=10)


def missing_modules(names: Sequence[str] = NEEDS) -> list[str]:
    """The names of ``names`` that cannot be imported here (found without importing them)."""
    missing = []
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _bench() -> Any:
    """benchmarks/libero_env_workers.py, loaded from beside this file."""
    if "libero_env_workers" not in sys.modules:
        path = Path(__file__).resolve().with_name("libero_env_workers.py")
        spec = importlib.util.spec_from_file_location("libero_env_workers", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["libero_env_workers"] = module  # as gpu_check.load_sibling (this file imports nothing of it)
        spec.loader.exec_module(module)
    return sys.modules["libero_env_workers"]


def _spread(s: dict[str, float] | None, unit: str = "") -> str:
    if s is None:
        return "-"
    return f"{s['median']:.2f}{unit} ({s['min']:.2f}..{s['max']:.2f})"


def point_line(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """(status, check, name, detail) of one point of ``libero_env_workers.summarise``: INFO, numbers without a goal."""
    parts = ("env", "env_build", "env_reset", "env_workers_start", "planning", "action", "scheduler")
    split = " / ".join(f"{row[p + '_ms']['median'] / 1000:.1f}" for p in parts)
    detail = (f"policy steps/s of the run {_spread(row['steps_per_s'])}, vs W=0 "
              f"{_spread(row['speedup_steps_per_s'], 'x')}; "
              f"env steps/s of the stepping phase {_spread(row['env_steps_per_s'])}, vs W=0 "
              f"{_spread(row['speedup_env_steps_per_s'], 'x')}; one env step's own ms {_spread(row['env_step_ms'])}; "
              f"worker start-up {row['env_workers_start_ms']['median'] / 1000:.1f} s; wall s env / builds / resets / "
              f"worker start-up / planner / action expert / scheduling {split}; "
              f"peak RSS {row['peak_rss_mb']['max'] / 1024:.1f} GB; "
              f"{row['repeats']} repeat(s); load {'; '.join(row['loads'])}")
    return "INFO", f"{CHECK}:N={row['slots']},W={row['workers']}", "steps/s", detail


def run_libero_workers(out: Path, device: str, cpu_smoke: bool, left_s: Callable[[], float],
                       env: str = "libero-object", needs: Sequence[str] = NEEDS,
                       ) -> Iterator[tuple[str, str, str, str]]:
    """The part's verdicts as (status, check, name, detail), each as soon as it is known; the runs' numbers in
    ``<out>/libero_env_workers.json`` and their logs under ``<out>/libero_env_workers_runs/``."""
    missing = missing_modules(needs)
    if missing:
        yield ("SKIP", CHECK, "LIBERO with env workers", f"{', '.join(missing)} not importable here (install "
               "'lmmbench[libero]': scripts/setup.sh --dev); nothing measured")
        return
    g = grid(cpu_smoke)
    bench = _bench()
    points = bench.grid_points(list(g.slots), list(g.workers))
    yield ("INFO", CHECK, "grid", f"{env}, pi0-tiny on {device}, N x W = {points}, {g.repeats} repeat(s), "
           f"{g.max_steps} policy steps per episode, {os.cpu_count()} cores")
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {p: [] for p in points}
    for r in range(g.repeats):
        for n, w in points:
            if left_s() < 60:
                yield ("SKIP", f"{CHECK}:N={n},W={w}", f"repeat {r}", "time budget spent")
                continue
            try:
                runs[(n, w)].append({**bench.run_point(env, n, w, g.max_steps, out / "libero_env_workers_runs" /
                                                       f"n{n}w{w}r{r}", device=device, timeout_s=left_s()),
                                     "repeat": r})
            except RuntimeError as exc:
                yield ("FAIL", f"{CHECK}:N={n},W={w}", f"repeat {r}", str(exc))
            (out / "libero_env_workers.json").write_text(json.dumps(
                {f"{k[0]},{k[1]}": v for k, v in runs.items()}, indent=1), encoding="utf-8")
    done = {p: v for p, v in runs.items() if v}
    for row in bench.summarise(done):
        yield point_line(row)
