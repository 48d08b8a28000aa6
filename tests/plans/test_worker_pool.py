"""The local worker pool: a killed worker's row is retried and the plan finishes; too many crashes
fail the row with its log; GPU slots and the NVML sampler (a fake NVML: no GPU here)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lmmbench.executors import load_plan
from lmmbench.executors.base import ExecutorSettings
from lmmbench.executors.gpus import GpuInfo, GpuSampler, discover_gpus
from lmmbench.executors.jobs import Job, RowResult
from lmmbench.executors.local import worker_argv
from lmmbench.executors.pool import Slot, WorkerPool, make_slots
from lmmbench.executors.runner import run_plan


def _slow_perf_plan(write_plan: Any, max_retries: int) -> Path:
    """A perf row that works for about 2 s against a real test server."""
    return write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5, "itl_ms": 1}},
        {"name": "load", "kind": "perf", "server": "ts",
         "options": {"num_requests": 40, "rate": 20, "arrival": "constant", "output_tokens": 2}},
    ], max_retries=max_retries)  # fmt: skip


def _kill_first_worker(row_dir: Path, killed: list[int]) -> None:
    """SIGKILL the first worker of ``row_dir`` once it has started its run."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = list(row_dir.glob("worker-*.pid"))
        if pids and (row_dir / "perf").is_dir():  # the worker is inside run_perf
            pid = int(pids[0].read_text())
            time.sleep(0.3)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.05)


def test_killed_worker_is_retried_and_the_plan_finishes(write_plan: Any, tmp_path: Path) -> None:
    plan = load_plan(_slow_perf_plan(write_plan, max_retries=2))
    killed: list[int] = []
    killer = threading.Thread(target=_kill_first_worker, args=(tmp_path / "out" / "p" / "load", killed))
    killer.start()
    run = run_plan(plan, "subprocess")
    killer.join()
    assert len(killed) == 1
    load = next(r for r in run.results if r.name == "load")
    assert load.status == "ok" and load.attempts == 2, load.error
    assert load.metrics["ok"] == 40
    row = tmp_path / "out" / "p" / "load"
    assert (row / "worker-attempt1.log").is_file() and (row / "worker-attempt2.log").is_file()
    assert not (row / "perf" / "run" / "records.partial.jsonl").exists()


def test_worker_killed_more_than_max_retries_fails_the_row_with_its_log(write_plan: Any, tmp_path: Path) -> None:
    plan = load_plan(_slow_perf_plan(write_plan, max_retries=0))
    killed: list[int] = []
    killer = threading.Thread(target=_kill_first_worker, args=(tmp_path / "out" / "p" / "load", killed))
    killer.start()
    run = run_plan(plan, "subprocess")
    killer.join()
    load = next(r for r in run.results if r.name == "load")
    assert load.status == "failed" and load.attempts == 1
    assert "worker crashed 1 times" in (load.error or "") and "exit code -9" in (load.error or "")
    assert "worker-attempt1.log" in (load.error or "")
    again = run_plan(load_plan(_slow_perf_plan(write_plan, max_retries=0)), "subprocess")  # failed rows re-run
    assert again.skipped == [] and next(r for r in again.results if r.name == "load").status == "ok"


class FakeNvml:
    """A fake NVML (no GPU on this machine): two GPUs with scripted utilisation and memory."""

    def __init__(self) -> None:
        self.util = [10.0, 30.0, 50.0]
        self.calls = 0

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"Fake GPU"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self.calls += 1
        return SimpleNamespace(gpu=self.util[min(self.calls - 1, 2)])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=(1024 + 512 * min(self.calls, 3)) * 2**20, total=80 * 2**30)


def test_gpu_discovery_and_sampler_fake_nvml() -> None:
    nvml = FakeNvml()
    gpus = discover_gpus(nvml)
    assert [(g.index, g.name, g.memory_mib, g.source) for g in gpus] == [(0, "Fake GPU", 80 * 1024, "nvml"),
                                                                         (1, "Fake GPU", 80 * 1024, "nvml")]
    assert [s.gpu.index for s in make_slots(4, gpus) if s.gpu] == [0, 1]  # one worker per GPU
    sampler = GpuSampler(nvml, 1, interval_s=0.01).start()
    time.sleep(0.2)
    out = sampler.stop()
    assert out["gpu_util_pct_max"] == 50.0 and 10.0 < out["gpu_util_pct_mean"] <= 50.0
    assert out["gpu_mem_used_mib_max"] == 1024 + 512 * 3


def test_cpu_only_machine_gets_cpu_slots_and_no_gpu_fields() -> None:
    assert discover_gpus() == []  # this machine has no GPU: NVML and torch both find none
    assert make_slots(3, []) == [Slot(0), Slot(1), Slot(2)]


def test_pool_gives_each_worker_its_gpu_and_stores_samples_fake_nvml(tmp_path: Path) -> None:
    job = Job(name="j", kind="perf", config={}, row_dir=str(tmp_path / "j"), executor="subprocess")
    script = ("import json,os,sys,time; time.sleep(0.3); json.dump({'name':'j','kind':'perf','status':'ok',"
              "'metrics':{'cuda_visible_devices': os.environ['CUDA_VISIBLE_DEVICES']}}, open('result.json','w'))")

    def launch(job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
        assert worker_argv("py", job_path)[1:3] == ["-m", "lmmbench.executors.worker"]
        return [sys.executable, "-c", f"import os; os.chdir({str(job_path.parent)!r}); {script}"], {}

    done: list[RowResult] = []
    pool = WorkerPool(ExecutorSettings(tmp_path), launch, slots=[Slot(0, GpuInfo(1, "Fake GPU", 1.0, "nvml"))],
                      nvml=FakeNvml())  # fmt: skip
    pool.run([job], done.append)
    assert done[0].status == "ok" and done[0].metrics["cuda_visible_devices"] == "1"
    assert done[0].metrics["gpu_util_pct_max"] > 0 and done[0].metrics["gpu_samples"] >= 1
