"""Faults of a served policy (``--policy ws://``) and the served run's time split.

A server killed mid-run (the real ``lmmbench serve-policy`` in a subprocess, SIGKILL by its pid), one that answers
garbage and one that stalls past ``--call-timeout-s`` (a small openpi-protocol server written here on the real
``websockets`` library, in a thread, on a port chosen at run time): each affected episode fails with its cause
named, the others finish, the run ends in bounded time, and what was measured before the fault is all there.
The time split is checked against a server with a known injected delay."""

from __future__ import annotations

import asyncio
import csv
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from serve_policy_process import serve_policy

from lmmbench.cli.main import main

COMMON = ["run", "episodic-eval", "--num-trials-per-task", "1", "--num-steps-wait", "0", "--warmup", "0",
          "--no-progress"]  # fmt: skip


class FakeServer:
    """openpi's protocol by hand (metadata on connect, msgpack-numpy answers with ``server_timing``); per request,
    ``reply(task)`` says what the episode of that task gets: ``ok`` (a stand-still chunk after ``delay_s``, its
    ``infer_ms`` the sleep as measured here), ``garbage`` (bytes that are not msgpack), ``text`` (an error text frame
    and a close, as openpi's server on an exception) or ``stall`` (no answer until the server stops)."""

    def __init__(self, reply: Callable[[int], str], delay_s: float = 0.0) -> None:
        self.reply = reply
        self.delay_s = delay_s
        self.port = 0
        self.infer_ms: list[float] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _handler(self, ws: Any) -> None:
        import numpy as np
        from websockets.exceptions import ConnectionClosed

        from lmmbench.episodes.served.codec import packb, unpackb

        assert self._stop is not None
        await ws.send(packb({"server": "fake", "action_dim": 2}))
        try:
            async for message in ws:
                kind = self.reply(int(unpackb(message)["lmmbench/episode"][0]))
                if kind == "garbage":
                    await ws.send(b"\xc1\xc1 this is not msgpack")
                elif kind == "text":  # openpi's server on an exception: its text as a text frame, then close
                    await ws.send("ValueError: the policy failed")
                    await ws.close(code=1011)
                    return
                elif kind == "stall":
                    await self._stop.wait()
                    return
                else:
                    t0 = time.perf_counter_ns()
                    await asyncio.sleep(self.delay_s)
                    infer_ms = (time.perf_counter_ns() - t0) / 1e6
                    self.infer_ms.append(infer_ms)
                    await ws.send(packb({"actions": np.zeros((1, 2)), "server_timing": {"infer_ms": infer_ms}}))
        except ConnectionClosed:
            pass

    async def _main(self) -> None:
        from websockets.asyncio.server import serve

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with serve(self._handler, "127.0.0.1", 0, compression=None) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> FakeServer:
        self._thread.start()
        assert self._ready.wait(30), "the fake server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the fake server did not stop"


def _rows(out: Path) -> list[dict[str, str]]:
    with (out / "episodic-eval" / "episodic-eval_results.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _served(out: Path) -> dict[str, Any]:
    run = json.loads((out / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]
    return dict(run["served_policy"])


@pytest.mark.parametrize("fault,cause", [("garbage", "malformed"), ("stall", "timeout"), ("text", "server_error")])
def test_a_garbage_or_stalled_answer_fails_only_its_episode_with_the_cause(
        fault: str, cause: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Task 1's episode gets garbage / no answer (call timeout 1 s) / an error text frame; tasks 0, 2 and 3
    finish; the row of task 1 names the cause, run.json and the printed line count it; a stalled call waited the
    timeout, no more hang."""
    with FakeServer(lambda task: fault if task == 1 else "ok") as server:
        t0 = time.monotonic()
        code = main([*COMMON, "--policy", f"ws://127.0.0.1:{server.port}", "--num-tasks", "4", "--max-steps", "5",
                     "--call-timeout-s", "1", "--out-dir", str(tmp_path)])
        took = time.monotonic() - t0
    assert code == 3  # partial: some rows failed
    assert took < 60  # the stall costs one timeout (1 s), not the server's stall
    rows = {r["sample_id"]: r for r in _rows(tmp_path)}
    assert len(rows) == 4
    failed = {k: r for k, r in rows.items() if r["status"] != "ok"}
    assert list(failed) == ["task1_trial0"] and f"served policy {cause}" in failed["task1_trial0"]["error"]
    assert all(rows[f"task{t}_trial0"]["steps"] == "5" for t in (0, 2, 3))  # the others ran to the end
    served = _served(tmp_path)
    assert served["faults"] == {cause: 1} and served["failed_requests"] == 1
    assert served["requests"] == 3 * 5  # every answered call of the other episodes is counted
    if fault == "stall":
        assert served["fault_records"][0]["after_ms"] >= 1000  # it waited the call timeout
    out = capsys.readouterr().out
    assert f"1 request(s) failed, each failing its episode: 1 {cause}" in out


def test_a_server_killed_mid_run_fails_the_episodes_left_and_keeps_what_was_measured(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """serve-policy is SIGKILLed once the first episode's row is written: the episodes in flight and those not
    started fail as connection_lost; the rows written before stay; every answered call is in run.json (the traces
    file's chunks, written per episode, are the independent count)."""
    from lmmbench.episodes.compare import read_traces

    results = tmp_path / "episodic-eval" / "episodic-eval_results.csv"
    with serve_policy("--policy", "toy", "--max-wait-ms", "40", "--max-batch", "8", "--port", "0") as (proc, port):
        def kill_after_first_row() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                if results.is_file() and len(results.read_text().splitlines()) >= 2:  # header + a row
                    proc.kill()
                    return
                time.sleep(0.005)

        watcher = threading.Thread(target=kill_after_first_row)
        watcher.start()
        t0 = time.monotonic()
        code = main([*COMMON, "--policy", f"ws://127.0.0.1:{port}", "--num-tasks", "6", "--num-parallel", "2",
                     "--max-steps", "30", "--call-timeout-s", "30", "--out-dir", str(tmp_path)])
        took = time.monotonic() - t0
        watcher.join(timeout=60)
        assert proc.poll() is not None, "the server was not killed during the run"
    assert code == 3 and took < 120
    rows = _rows(tmp_path)
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(rows) == 6 and ok and failed
    assert all("served policy connection_lost" in r["error"] for r in failed)
    served = _served(tmp_path)
    assert served["faults"] == {"connection_lost": len(failed)}
    traces = read_traces(tmp_path / "episodic-eval" / "episodic-eval_traces.jsonl")
    assert served["requests"] == sum(len(t.trace) for t in traces.values())  # nothing answered is lost
    assert f"{len(failed)} connection_lost" in capsys.readouterr().out


def test_the_time_split_adds_up_to_the_wall_time_and_inside_the_server_is_within_waiting(tmp_path: Path) -> None:
    """A server that sleeps 20 ms per call (its infer_ms the measured sleep): inside the server is at least 20 ms
    per action call and at most the waiting for the server; environment + waiting + lmmbench is the run's wall time
    (tolerance 0.01 ms: run.json rounds each number), lmmbench's share is not negative (no time counted twice), the
    run's wall time fits in the command's; calls per second are the calls over that wall time."""
    with FakeServer(lambda task: "ok", delay_s=0.02) as server:
        t0 = time.perf_counter_ns()
        code = main([*COMMON, "--policy", f"ws://127.0.0.1:{server.port}", "--num-tasks", "3", "--max-steps", "6",
                     "--out-dir", str(tmp_path)])
        outer_ms = (time.perf_counter_ns() - t0) / 1e6
    assert code == 0
    served = _served(tmp_path)
    split = served["time_split_ms"]
    analysis = json.loads((tmp_path / "episodic-eval" / "episodic-eval_analysis.json").read_text())
    calls = analysis["run"]["action_calls"]
    assert calls >= 6 and served["requests"] == 3 * 6
    assert split["inside_server"] >= calls * 20.0 * 0.999  # the injected delay, per call (the ground truth)
    assert split["inside_server"] <= split["waiting_for_server"]
    assert split["lmmbench"] >= 0
    total = split["environment"] + split["waiting_for_server"] + split["lmmbench"]
    assert abs(total - split["wall"]) <= 0.01
    assert split["wall"] <= outer_ms
    assert served["calls_per_s"] == pytest.approx(served["requests"] / (split["wall"] / 1000), rel=1e-3)
    assert served["latency_ms_p50"] <= served["latency_ms_p90"] <= served["latency_ms_p99"] <= served["latency_ms_max"]
    assert served["latency_ms_p50"] >= 20.0  # each call's client-side latency holds the server's sleep
    assert "served_policy" in analysis and analysis["served_policy"]["time_split_ms"] == split


def test_call_timeout_on_a_policy_that_is_not_served_is_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*COMMON, "--policy", "toy", "--num-tasks", "1", "--max-steps", "2", "--call-timeout-s", "5",
                 "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--call-timeout-s 5: --policy toy is not served" in err and len(err.splitlines()) == 1
