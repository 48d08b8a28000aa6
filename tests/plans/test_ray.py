"""Ray: a killed Ray worker's row is retried by Ray itself (max_retries) and the plan finishes; a timing row
(perf) runs alone on its node (its start-end interval overlaps no other row's but its server's) while two
eval rows share the node and overlap;
`perf --executor ray --workers 2` slices one global schedule over two Ray actors, merges the records
and estimates each actor's clock offset near zero (one machine); a Ray row starts when its needs end (one of them
a row in the driver), not after an unrelated slow Ray row. One real local Ray cluster serves
the module (the executors join a running cluster and leave it running)."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.core.request_records import RequestRecord
from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan
from lmmbench.loadgen.ray_fanout import estimate_offset, shift_record
from lmmbench.sessions.perf.session import run_perf
from lmmbench.testing import running_testserver

RATE = 40.0
N = 40


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster for the module's tests, shut down after them."""
    if os.environ.get("CI"):  # CI installs lmmbench[all]: a missing ray fails here instead of skipping
        import ray
    else:
        ray = pytest.importorskip("ray", reason="the ray extra is part of lmmbench[all]")
    from lmmbench.loadgen.ray_fanout import MACHINE_RESOURCE, MACHINE_UNITS

    ray.init(num_cpus=max(2, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False,
             resources={MACHINE_RESOURCE: MACHINE_UNITS})  # as init_ray starts a local cluster
    nap = lambda s: __import__("time").sleep(s)  # noqa: E731  (pickled by value: the workers cannot import tests)
    warm = ray.remote(num_cpus=1)(nap)  # two workers exist before the tests (not counted as leaked)
    ray.get([warm.remote(0.5) for _ in range(2)])
    yield
    ray.shutdown()


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


def test_killed_ray_worker_is_retried_by_ray_and_the_plan_finishes(ray_cluster: None, write_plan: Any,
                                                                   tmp_path: Path) -> None:
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


def _ray_workers() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("ray::IDLE")}


def test_a_perf_row_gets_its_node_while_eval_rows_share_theirs(ray_cluster: None, write_plan: Any) -> None:
    evals = {"kind": "eval", "model": "tiny-llm", "options": {"tasks": ["sample_mc"], "limit": 4, "threads": 1}}
    path = write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5}},
        {"name": "e1", **evals}, {"name": "load", "kind": "perf", "server": "ts",
                                  "options": {"num_requests": 20, "rate": 20, "output_tokens": 2}},
        {"name": "e2", **evals},
    ], name="machine")  # fmt: skip
    workers = _ray_workers()
    run = run_plan(load_plan(path), "ray")
    for pid in _ray_workers() - workers:  # idle workers Ray started for the backlog of this plan and keeps
        os.kill(pid, signal.SIGKILL)
    rows = {r.name: r for r in run.results}
    assert all(r.status == "ok" for r in rows.values()), [r.error for r in rows.values()]

    def overlap(a: str, b: str) -> bool:
        ra, rb = rows[a], rows[b]
        assert None not in (ra.started_at_s, ra.ended_at_s, rb.started_at_s, rb.ended_at_s)
        return ra.started_at_s < rb.ended_at_s and rb.started_at_s < ra.ended_at_s  # type: ignore[operator]

    assert not overlap("load", "e1") and not overlap("load", "e2")
    assert overlap("e1", "e2")  # the two eval rows ran side by side
    assert rows["load"].contention is None and not run.warnings


def test_offset_estimate_and_record_shift_against_a_known_skew() -> None:
    import time

    skew = 7_000_000_000  # a remote clock 7 s ahead of ours
    off, rtt = estimate_offset(lambda: time.perf_counter_ns() + skew, pings=5)
    assert abs(off - skew) <= rtt // 2 + 1
    rec = RequestRecord(request_id=1, scheduled_ns=skew + 10, sent_ns=skew + 20, end_ns=0,
                        chunk_times_ns=[skew + 30, 0])
    shift_record(rec, skew)
    assert (rec.scheduled_ns, rec.sent_ns, rec.end_ns, rec.chunk_times_ns) == (10, 20, 0, [30, 0])


def test_perf_executor_ray_slices_one_schedule_over_actors(ray_cluster: None, tmp_path: Path) -> None:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=20, itl_ms=5)) as url:
        cfg = PerfConfig.model_validate({"url": url, "executor": "ray", "workers": 2, "rate": RATE,
                                         "arrival": "constant", "num_requests": N, "output_tokens": 4,
                                         "out_dir": str(tmp_path), "run_name": "ray", "progress": False,
                                         "plots": False})  # fmt: skip
        run = run_perf(cfg)
    res = run.results[0]
    assert res.summary["ok"] == N and res.workers == 2
    assert sorted({r.worker for r in res.records}) == [0, 1]
    assert len(res.worker_clocks) == 2
    for clock in res.worker_clocks:  # one machine: one monotonic clock, so the offset is within the ping
        assert abs(clock.offset_ns) <= clock.rtt_ns // 2 + 1, clock
    # one global schedule: the merged scheduled instants are 1/RATE apart whichever actor sent them
    sched = sorted(r.scheduled_ns for r in res.records if not r.warmup)
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(sched)]
    assert all(abs(g - 1000 / RATE) < 1.0 for g in gaps_ms), gaps_ms
    ttft = res.summary["metrics"]["ttft_send_ms"]
    # merged instants are consistent: no request is faster than the injected delay (a wrong clock
    # shift would show here); two Ray actors, a raylet and the server share 2 CPUs, so the median
    # gets a loose bound (one CI run saw a 25 ms mean with a 30 ms p99 lateness under that load)
    assert ttft["min"] >= 19.9 and ttft["p50"] - 20.0 <= 5.0, ttft
    assert (tmp_path / "perf" / "ray" / "records.jsonl").is_file()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_plan_on_ray_cancels_its_row_and_keeps_the_measured_requests(
    ray_cluster: None, write_plan: Any, sig: int, code: int
) -> None:
    """``lmmbench batch`` joins this module's cluster (a second local cluster would cost tens of seconds here):
    the plan's own processes (the driver's group, the server's) are gone before a pacer started with the signal
    is (tests/pacer.py), the cancelled perf row is
    ``interrupted`` with the requests it measured (its task wrote them before Ray's cancellation came back)."""
    import ray

    from .test_plan_interrupt import check_interrupted_files, interrupt_plan, long_plan

    address = ray.get_runtime_context().gcs_address
    plan_dir, text = interrupt_plan(long_plan(write_plan, "ray"), sig, pid_file="ray-attempt-*.pid",
                                    args=("--ray-address", address))  # fmt: skip
    load = check_interrupted_files(plan_dir)
    assert load["executor"] == "ray" and "2 interrupted (ts, load)" in text, text[-2000:]


def test_num_gpus_beyond_the_ray_clusters_refused_before_anything_runs(
        ray_cluster: None, write_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import ray

    have = int(ray.cluster_resources().get("GPU", 0))
    path = write_plan([{"name": "g", "kind": "command", "executor": "ray", "num_gpus": have + 1,
                        "options": {"command": "true"}}], name="raygpu")  # fmt: skip
    assert main(["batch", str(path)]) == 2
    assert f"row 'g': num_gpus: {have + 1} but the Ray cluster has {have} GPU(s)" in capsys.readouterr().err
    assert not (path.parent / "out" / "raygpu" / "g" / "status.json").exists()
    assert ray.is_initialized()  # the cluster the plan found is left as it was


def test_a_ray_row_starts_when_its_needs_end_beside_an_inprocess_row(ray_cluster: None, write_plan: Any,
                                                                     tmp_path: Path) -> None:
    """Order of events, no clock: 'slow' (Ray) ends only once 'after' (Ray, which needs 'mid', run in the driver,
    which needs the quick Ray row 'first') has written its mark: in waves 'slow' would wait for ever (here: fail
    after 60 s). The hand-off crosses Ray and the driver both ways while Ray's tasks run."""
    mark = tmp_path / "after-ran"
    wait = f"import pathlib, sys, time; m, t = pathlib.Path({str(mark)!r}), time.monotonic()\n" + (
        "while not m.exists() and time.monotonic() - t < 60: time.sleep(0.05)\nsys.exit(0 if m.exists() else 1)\n")
    (tmp_path / "wait.py").write_text(wait)
    path = write_plan([
        {"name": "slow", "kind": "command", "options": {"command": f"{{python}} {tmp_path / 'wait.py'}"}},
        {"name": "first", "kind": "command", "options": {"command": "true"}},
        {"name": "mid", "kind": "command", "executor": "inprocess", "needs": ["first"], "options": {"command": "true"}},
        {"name": "after", "kind": "command", "needs": ["mid"], "options": {"command": f"touch {mark}"}},
    ], name="rayorder", executor="ray")  # fmt: skip
    workers = _ray_workers()
    run = run_plan(load_plan(path))
    for pid in _ray_workers() - workers:  # idle workers Ray started for this plan and keeps
        os.kill(pid, signal.SIGKILL)
    st = {r.name: r for r in run.results}
    assert all(r.status == "ok" for r in st.values()), {n: r.error for n, r in st.items()}
    assert [st[n].executor for n in ("slow", "first", "mid", "after")] == ["ray", "ray", "inprocess", "ray"]
    assert st["after"].started_at_s < st["slow"].ended_at_s  # type: ignore[operator]
    assert st["first"].ended_at_s <= st["mid"].started_at_s  # type: ignore[operator]
    assert st["mid"].ended_at_s <= st["after"].started_at_s  # type: ignore[operator]
