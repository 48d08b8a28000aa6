"""Under the ray executor (a real local Ray cluster), a killed Ray worker's row is retried by Ray
itself (max_retries) and the plan finishes."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan


def _kill_first_ray_worker(row_dir: Path, killed: list[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pids = list(row_dir.glob("ray-attempt-*.pid"))
        if pids and (row_dir / "perf").is_dir():  # the task is inside run_perf
            time.sleep(0.3)
            os.kill(int(pids[0].read_text()), signal.SIGKILL)
            killed.append(pids[0].name)
            return
        time.sleep(0.05)


def test_killed_ray_worker_is_retried_by_ray_and_the_plan_finishes(write_plan: Any, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is part of lmmbench[all], which CI installs")
    path = write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5, "itl_ms": 1}},
        {"name": "load", "kind": "perf", "server": "ts",
         "options": {"num_requests": 40, "rate": 20, "arrival": "constant", "output_tokens": 2}},
    ], max_retries=2)  # fmt: skip
    killed: list[str] = []
    killer = threading.Thread(target=_kill_first_ray_worker, args=(tmp_path / "out" / "p" / "load", killed))
    killer.start()
    run = run_plan(load_plan(path), "ray")
    killer.join()
    assert len(killed) == 1
    load = next(r for r in run.results if r.name == "load")
    assert load.status == "ok" and load.attempts == 2, load.error
    assert load.metrics["ok"] == load.metrics["requests"] == 40
    import ray

    assert not ray.is_initialized()  # the executor shut down the cluster it started
