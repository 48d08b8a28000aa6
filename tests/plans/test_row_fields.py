"""Every plan-row field honoured or refused: requirements where nothing installs them are refused at
validation (exit 2, the row named); num_cpus holds that many slots of the local pool; a serve row's port
is the port it listens on; fields a serve row cannot honour are refused; a Ray row's requirements go into
its task's runtime_env (checked on the value handed to Ray: installing through Ray's pip runtime_env
takes minutes here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.core.net import free_loopback_port
from lmmbench.executors.jobs import Job
from lmmbench.executors.plan import load_plan
from lmmbench.executors.ray_executor import runtime_env
from lmmbench.executors.runner import resolve_plan, run_plan

SLEEP_S = 3.0  # each command row sleeps this long: long enough that two rows side by side overlap


@pytest.mark.parametrize("executor", ["subprocess", "inprocess"])
def test_requirements_on_a_driver_executor_refused_at_validation(write_plan: Any, executor: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = write_plan([
        {"name": "ok", "kind": "perf", "options": {"url": "http://127.0.0.1:1/v1", "num_requests": 1}},
        {"name": "needy", "kind": "perf", "executor": executor, "requirements": ["psutil"],
         "options": {"url": "http://127.0.0.1:1/v1", "num_requests": 1}},
    ], name="req")  # fmt: skip
    assert main(["batch", str(path)]) == 2
    err = capsys.readouterr().err
    assert "row 2 'needy': requirements:" in err and f"the '{executor}' executor" in err
    assert "Traceback" not in err
    assert not (path.parent / "out" / "req").exists()  # refused before anything ran


def test_requirements_on_installing_executors_accepted(write_plan: Any) -> None:
    rows = [{"name": f"r{e}", "kind": "perf", "executor": e, "requirements": ["psutil"], "image": None,
             "options": {"url": "http://127.0.0.1:1/v1", "num_requests": 1}} for e in ("venv", "ray")]
    jobs = resolve_plan(load_plan(write_plan(rows)))
    assert [j.requirements for j in jobs] == [["psutil"], ["psutil"]]


def test_ray_row_requirements_go_into_its_runtime_env(tmp_path: Path) -> None:
    constraints = tmp_path / "c.txt"
    constraints.write_text("psutil<99\n")
    job = Job(name="x", kind="perf", config={}, row_dir=str(tmp_path), executor="ray", requirements=["psutil"])
    env = runtime_env(job, constraints)
    assert env["pip"]["packages"] == ["psutil"]
    assert env["pip"]["pip_install_options"][-2:] == ["-c", str(constraints.resolve())]
    assert runtime_env(job.model_copy(update={"requirements": []}), constraints) == {}


def _sleep_row(name: str, num_cpus: float) -> dict[str, Any]:
    return {"name": name, "kind": "command", "num_cpus": num_cpus,
            "options": {"command": f"{{python}} -c 'import time; time.sleep({SLEEP_S})'"}}


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return bool(a["started_at_s"] < b["ended_at_s"] and b["started_at_s"] < a["ended_at_s"])


def test_num_cpus_holds_that_many_pool_slots(write_plan: Any, tmp_path: Path) -> None:
    wide = write_plan([_sleep_row("wide", 2), _sleep_row("narrow", 1)], name="wide", workers=2,
                      executor="subprocess")
    run = run_plan(load_plan(wide))
    res = {r.name: r.model_dump() for r in run.results}
    assert res["wide"]["status"] == res["narrow"]["status"] == "ok", res
    assert not _overlap(res["wide"], res["narrow"])  # the 2-CPU row held both slots
    # the control: two 1-CPU rows on the same pool do run side by side (so the check above can fail)
    both = write_plan([_sleep_row("a", 1), _sleep_row("b", 1)], name="both", workers=2, executor="subprocess")
    res = {r.name: r.model_dump() for r in run_plan(load_plan(both)).results}
    assert _overlap(res["a"], res["b"]), res


def test_num_cpus_beyond_the_pool_fails_that_row_alone(write_plan: Any) -> None:
    path = write_plan([_sleep_row("huge", 3), {**_sleep_row("small", 1), "options": {"command": "true"}}],
                      name="huge", workers=2, executor="subprocess")
    res = {r.name: r for r in run_plan(load_plan(path)).results}
    assert res["huge"].status == "failed" and "num_cpus: the row needs 3 slots" in (res["huge"].error or "")
    assert res["small"].status == "ok"


def test_serve_row_port_is_the_port_it_listens_on(write_plan: Any) -> None:
    port = free_loopback_port()
    path = write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "port": port, "ttft_ms": 1}},
        {"name": "load", "kind": "perf", "server": "ts", "options": {"num_requests": 2, "output_tokens": 2}},
    ], name="port")  # fmt: skip
    assert main(["batch", str(path)]) == 0
    out = path.parent / "out" / "port"
    assert json.loads((out / "ts" / "status.json").read_text())["metrics"]["url"] == f"http://127.0.0.1:{port}/v1"
    assert f"--port {port}" in (out / "ts" / "server.log").read_text().splitlines()[0]


@pytest.mark.parametrize(("extra", "field"), [
    ({"requirements": ["psutil"]}, "requirements"), ({"executor": "venv"}, "executor"),
    ({"num_gpus": 1}, "num_gpus"), ({"options": {"command": "testserver", "host": "10.1.2.3"}}, "options.host"),
])  # fmt: skip
def test_serve_row_fields_it_cannot_honour_refused(write_plan: Any, extra: dict[str, Any], field: str) -> None:
    row = {"name": "ts", "kind": "serve", "options": {"command": "testserver"}, **extra}
    with pytest.raises(UserError, match=f"row 1 'ts': {field}:"):
        resolve_plan(load_plan(write_plan([row])))


def test_spec_on_a_row_that_runs_no_spec_refused(write_plan: Any) -> None:
    row = {"name": "p", "kind": "perf", "spec": "ttft-breakdown", "options": {"url": "http://127.0.0.1:1/v1"}}
    with pytest.raises(UserError, match="row 1 'p': spec: only a run row runs a spec"):
        resolve_plan(load_plan(write_plan([row])))


def test_python_of_another_version_refused_off_venv(write_plan: Any) -> None:
    other = "3.99" if sys.version_info[:2] != (3, 99) else "3.98"
    row = {"name": "p", "kind": "perf", "python": other, "executor": "subprocess",
           "options": {"url": "http://127.0.0.1:1/v1", "num_requests": 1}}
    with pytest.raises(UserError, match="row 1 'p': python:"):
        resolve_plan(load_plan(write_plan([row])))


def test_num_gpus_row_sees_every_gpu_it_holds_fake_gpus(tmp_path: Path) -> None:
    """Two fake GPU slots (no GPU here): a num_gpus 2 row holds both, and both are in its CUDA_VISIBLE_DEVICES."""
    from tests.plans.test_worker_pool import FakeNvml

    from lmmbench.executors.base import ExecutorSettings
    from lmmbench.executors.gpus import GpuInfo
    from lmmbench.executors.jobs import RowResult
    from lmmbench.executors.pool import Slot, WorkerPool

    script = ("import json,os; json.dump({'name':'j','kind':'eval','status':'ok','metrics':"
              "{'cuda': os.environ['CUDA_VISIBLE_DEVICES']}}, open('result.json','w'))")

    def launch(job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-c", f"import os; os.chdir({str(job_path.parent)!r}); {script}"], {}

    slots = [Slot(0, GpuInfo(1, "Fake GPU", 1.0, "nvml")), Slot(1, GpuInfo(3, "Fake GPU", 1.0, "nvml"))]
    done: list[RowResult] = []
    job = Job(name="j", kind="eval", config={}, row_dir=str(tmp_path / "j"), executor="subprocess", num_gpus=2)
    WorkerPool(ExecutorSettings(tmp_path), launch, slots=slots, nvml=FakeNvml()).run([job], done.append)
    assert done[0].status == "ok" and done[0].metrics["cuda"] == "1,3"


@pytest.mark.parametrize(("extra", "field"), [
    ({"executor": "subprocess", "isolation": "isolated"}, "isolation"),
    ({"executor": "venv", "image": "img:1"}, "image"),
])  # fmt: skip
def test_environment_fields_of_another_executor_refused(write_plan: Any, extra: dict[str, Any], field: str) -> None:
    row = {"name": "p", "kind": "perf", "options": {"url": "http://127.0.0.1:1/v1"}, **extra}
    with pytest.raises(UserError, match=f"row 1 'p': {field}:"):
        resolve_plan(load_plan(write_plan([row])))


def test_plan_isolation_reaches_its_venv_rows_only_and_csv_needs(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("name,kind,model,options,executor,requirements,image,needs,isolation\n"
                    "a,perf,,url=http://127.0.0.1:1/v1,venv,,,,\n"
                    "b,perf,,url=http://127.0.0.1:1/v1,subprocess,,,a,\n"
                    "c,command,,command=echo hi,venv,,,a;b,isolated\n", encoding="utf-8")  # fmt: skip
    jobs = {j.name: j for j in resolve_plan(load_plan(path, {"isolation": "shared"}))}
    assert (jobs["a"].isolation, jobs["b"].isolation, jobs["c"].isolation) == ("shared", None, "isolated")
    assert jobs["b"].needs == ["a"] and jobs["c"].needs == ["a", "b"]


def test_ray_rows_with_requirements_fail_up_front_without_virtualenv(tmp_path: Path) -> None:
    """Ray's pip runtime_env needs virtualenv; without it (as in this test venv) such a row fails before the plan
    runs, naming why, and a row without requirements is handed on."""
    import importlib.util

    from lmmbench.executors.base import ExecutorSettings
    from lmmbench.executors.jobs import RowResult
    from lmmbench.executors.ray_executor import RayExecutor

    if importlib.util.find_spec("virtualenv") is not None:
        pytest.skip("virtualenv is installed here: Ray can install requirements")
    jobs = [Job(name=n, kind="perf", config={}, row_dir=str(tmp_path / n), executor="ray", requirements=r)
            for n, r in (("needy", ["psutil"]), ("plain", []))]
    done: list[RowResult] = []
    ready = RayExecutor(ExecutorSettings(tmp_path)).prepare(jobs, done.append)
    assert [j.name for j in ready] == ["plain"]
    assert done[0].name == "needy" and "needs virtualenv" in (done[0].error or "")
