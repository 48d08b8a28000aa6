"""Served policies over openpi's websocket protocol: ``lmmbench serve-policy`` in a real subprocess on a port chosen
at run time, driven by ``run episodic-eval --policy ws://`` and by the real ``openpi-client`` (its
``WebsocketClientPolicy``) from a venv of its own (openpi-client pins numpy < 2), built with uv and kept across runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from serve_policy_process import serve_policy

from lmmbench.cli.main import main
from pacer import returns_before_pacer


@contextmanager
def served(*args: str, metrics: Path | None = None, python: str | Path = sys.executable) -> Iterator[int]:
    """``lmmbench serve-policy ARGS --port 0 [--metrics-out METRICS]`` run by ``python`` (another venv's, with this
    checkout's ``src``): its port once it listens; stopped afterwards."""
    extra = ["--metrics-out", str(metrics)] if metrics else []
    with serve_policy(*args, "--port", "0", *extra, python=python) as (_, port):
        yield port


def _traces(out: Path) -> dict[str, Any]:
    from lmmbench.episodes.compare import read_traces

    return read_traces(out / "episodic-eval" / "episodic-eval_traces.jsonl")


def test_ws_driver_gives_the_in_process_outcomes_and_the_server_batches_8_connections(tmp_path: Path) -> None:
    """The same toy policy and seeds in-process and served: equal outcomes and actions; the 8 slots' requests
    were batched by the server (its histogram has batches > 1); run.json has the server's metadata and the calls."""
    import numpy as np

    common = ["run", "episodic-eval", "--num-tasks", "8", "--num-trials-per-task", "1", "--num-steps-wait", "0",
              "--max-steps", "12", "--warmup", "0", "--no-progress"]  # fmt: skip
    assert main([*common, "--policy", "toy", "--out-dir", str(tmp_path / "local")]) == 0
    metrics = tmp_path / "metrics.json"
    with served("--policy", "toy", "--max-batch", "8", "--max-wait-ms", "50", metrics=metrics) as port:
        assert main([*common, "--policy", f"ws://127.0.0.1:{port}", "--out-dir", str(tmp_path / "ws")]) == 0
    local, remote = _traces(tmp_path / "local"), _traces(tmp_path / "ws")
    assert sorted(local) == sorted(remote) and len(local) == 8
    for key, want in local.items():
        got = remote[key]
        assert (got.success, got.steps) == (want.success, want.steps)
        assert len(got.trace) == len(want.trace)
        for a, b in zip(got.trace, want.trace, strict=True):  # through different batch sizes: a tolerance
            sent = np.asarray(a, dtype=float)  # the executed chunk the server answered; in-process: the raw output
            assert np.allclose(sent, np.asarray(b, dtype=float)[: len(sent)], atol=1e-5)
    run = json.loads((tmp_path / "ws" / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]
    served_run = run["served_policy"]
    assert served_run["server_metadata"]["server"] == "lmmbench serve-policy" and run["policy_keys"] == "openpi"
    assert served_run["requests"] > 0 and served_run["request_bytes"] > 0 and served_run["connections"] <= 8 + 1
    histogram = json.loads(metrics.read_text())["batch_size_histogram"]
    assert any(int(size) > 1 for size in histogram)


@pytest.fixture(scope="module")
def openpi_client_python() -> Path:
    """A venv with the real openpi-client from the package index (it needs numpy < 2, so not lmmbench's venv), built
    with uv once and kept across runs (``tests/peer_venvs.py``)."""
    from peer_venvs import cached_venv

    # openpi-client 0.1.2 imports typing_extensions without declaring it (measured: ModuleNotFoundError)
    try:
        root = cached_venv("openpi-client", ["openpi-client==0.1.2", "numpy<2", "typing_extensions"])
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"uv could not install openpi-client here: {exc}")
    return root / "bin" / "python"


CLIENT = """
import json, sys
import numpy as np
from openpi_client import websocket_client_policy

client = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", int(sys.argv[1]))
obs = {"observation/image": np.zeros((3, 16, 16), np.float32), "observation/position": np.array([3.0, 4.0])}
obs["observation/image"][1, 9, 12] = 1.0
out = client.infer(obs)
print(json.dumps({"metadata": client.get_server_metadata(), "shape": list(np.asarray(out["actions"]).shape),
                  "actions": np.asarray(out["actions"]).tolist(), "timing": sorted(out["server_timing"]),
                  "numpy": np.__version__}))
"""


def test_openpi_clients_websocket_policy_gets_metadata_and_actions(openpi_client_python: Path,
                                                                   tmp_path: Path) -> None:
    with served("--policy", "toy") as port:
        done = subprocess.run([str(openpi_client_python), "-c", CLIENT, str(port)], capture_output=True, text=True,
                              timeout=300)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["numpy"].startswith("1.")  # the client's own numpy, not lmmbench's
    assert got["metadata"]["policy"] and got["metadata"]["server"] == "lmmbench serve-policy"
    assert len(got["shape"]) == 2 and got["shape"][0] >= 1 and got["shape"][1] == 2  # a chunk of (H, 2) moves
    assert "infer_ms" in got["timing"] and "queue_ms" in got["timing"]


def test_a_server_that_is_gone_is_one_line_naming_the_cause_not_a_hang(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with served("--policy", "toy") as port:
        url = f"ws://127.0.0.1:{port}"
    argv = ["run", "episodic-eval", "--policy", url, "--num-tasks", "2", "--num-trials-per-task", "1",
            "--num-steps-wait", "0", "--max-steps", "4", "--warmup", "0", "--out-dir", str(tmp_path)]
    # one line before a pacer of 40 fresh CLI imports finishes: a connection refused is known at once; a client
    # waiting for the server (a hang) would lose the race
    code, quickly = returns_before_pacer(lambda: main(argv), imports=40)
    assert code == 2 and quickly
    assert "Connection refused" in capsys.readouterr().err
