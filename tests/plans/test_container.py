"""The container executor, with a fake engine (no Docker daemon runs here) and with no engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan

FAKE_ENGINE = Path(__file__).parent / "fake_engine.py"


def _plan(write_plan: Any, image: str | None = "lmmbench:test") -> Path:
    return write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5}},
        {"name": "load", "kind": "perf", "server": "ts", "image": image,
         "options": {"num_requests": 5, "rate": 50, "output_tokens": 2}},
    ], executor="container")  # fmt: skip


def test_container_row_runs_with_its_folder_mounted_fake_engine(write_plan: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "engine.log"
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    run = run_plan(load_plan(_plan(write_plan)))
    load = next(r for r in run.results if r.name == "load")
    assert load.status == "ok" and load.executor == "container", load.error
    assert load.metrics["ok"] == 5
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0] == ["info"]
    run_argv = calls[1]
    row = str(tmp_path / "out" / "p" / "load")
    assert run_argv[:3] == ["run", "--rm", "-v"] and f"{row}:/lmmbench/run" in run_argv
    assert "LMMBENCH_HOME=/lmmbench/home" in run_argv and "lmmbench:test" in run_argv
    assert run_argv[-1] == "python -m lmmbench.executors.worker /lmmbench/run/job.json"
    assert (Path(row) / "perf" / "run" / "records.jsonl").is_file()  # written through the mount


def test_container_installs_requirements_with_constraints_fake_engine(write_plan: Any, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from lmmbench.executors.base import ExecutorSettings
    from lmmbench.executors.container import ContainerExecutor
    from lmmbench.executors.jobs import Job
    from lmmbench.executors.pool import Slot

    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "docker")
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    ex = ContainerExecutor(ExecutorSettings(tmp_path, constraints=constraints))
    job = Job(name="j", kind="eval", config={}, row_dir=str(tmp_path / "j"), executor="container",
              requirements=["pkg-a>=1"], image="img:1")
    from lmmbench.executors.gpus import GpuInfo

    argv, _ = ex._launch(job, tmp_path / "j" / "job.json", Slot(0, GpuInfo(3, "g", None, "nvml")))
    assert argv[argv.index("--gpus"):argv.index("--gpus") + 2] == ["--gpus", "device=3"]
    assert f"{constraints}:/lmmbench/constraints.txt:ro" in argv
    assert argv[-1].startswith("python -m pip install -q -c /lmmbench/constraints.txt 'pkg-a>=1' && python -m")


def test_no_container_engine_fails_the_container_rows_with_one_line_fake_engine(
        write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(tmp_path / "engine.log"))
    monkeypatch.setenv("FAKE_ENGINE_DOWN", "1")
    run = run_plan(load_plan(_plan(write_plan)))
    error = next(r for r in run.results if r.name == "load").error or ""
    assert "no container engine reachable" in error and "Cannot connect" in error and "\n" not in error
    assert (run.plan_dir / "plan.json").is_file()


def test_missing_engine_binary_and_missing_image(write_plan: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "no-such-container-engine")
    run = run_plan(load_plan(_plan(write_plan)))
    assert "no container engine reachable" in (next(r for r in run.results if r.name == "load").error or "")
    run = run_plan(load_plan(_plan(write_plan, image=None)))
    assert "names no image" in (next(r for r in run.results if r.name == "load").error or "")
