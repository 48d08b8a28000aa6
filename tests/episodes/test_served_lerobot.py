"""A real LeRobot policy served from its own environment: lerobot 0.4.4 (the newest for Python 3.11) pins torch
< 2.11, torchvision < 0.26 and huggingface-hub < 0.36, and lmmbench's ``models`` extra needs transformers >= 5.17
(huggingface-hub >= 1.5), so the two cannot share a venv. The fixture builds lerobot's with uv (cached across runs,
keyed by its requirements: ``tests/peer_venvs.py``) with lmmbench's base dependencies and the two the protocol
needs (msgpack, websockets); lmmbench's own code comes from this checkout (``PYTHONPATH=src``). ACT
(``lerobot_act_policy.py``: random weights, no download, stated normalisation statistics) is served by
``serve-policy`` from that venv and driven by ``run episodic-eval --policy ws://`` from this one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import tomllib
from serve_policy_process import MAIN, SRC
from test_served_policy import _traces, served

from lmmbench.cli.main import main

#: Not in scripts/test.sh's passes (its venv alone would take CI's budget): run by hand, with the result recorded in
#: docs/episodes.md -- `.venv/bin/python -m pytest -m peer_heavy tests/episodes/test_served_lerobot.py`
pytestmark = pytest.mark.peer_heavy

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = f"{Path(__file__).with_name('lerobot_act_policy.py')}:LeRobotACT"
LEROBOT = "lerobot==0.4.4"
VERSIONS = ("import json, sys, importlib.metadata as m; print(json.dumps({p: m.version(p) for p in ('lerobot', "
            "'torch', 'torchvision', 'huggingface-hub')}), flush=True); " + MAIN.removeprefix("import sys; "))


def lerobot_requirements() -> list[str]:
    """lerobot, lmmbench's base dependencies and its ``episodes`` extra but the in-process models (transformers:
    its ``plots`` instead, which ``run episodic-eval`` needs)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    extra = [d for d in extras["episodes"] + extras["plots"] if not d.startswith("lmmbench")]
    return [LEROBOT, *project["dependencies"], *extra]


@pytest.fixture(scope="module")
def lerobot_python() -> Path:
    from peer_venvs import cached_venv

    try:
        root = cached_venv("lerobot", lerobot_requirements())
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the lerobot venv could not be built here: {exc}")
    return root / "bin" / "python"


@pytest.mark.timeout(1800)  # the first run builds the venv (measured: about 3 min, 8 GB, with uv's cache cold)
def test_lerobots_act_served_from_its_own_venv_gives_the_in_process_outcomes(lerobot_python: Path,
                                                                              tmp_path: Path) -> None:
    """The same ACT and seeds in-process (in lerobot's venv) and over ws:// (serve-policy in lerobot's venv, the
    driver in lmmbench's): equal outcomes, actions within float32 tolerance through different batch sizes, the
    server's batches > 1, its metadata naming the policy; the venv really holds lerobot's pins."""
    import numpy as np

    common = ["run", "episodic-eval", "--num-tasks", "4", "--num-trials-per-task", "1", "--num-steps-wait", "0",
              "--max-steps", "8", "--warmup", "0", "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": SRC}
    local = subprocess.Popen([str(lerobot_python), "-c", VERSIONS, *common, "--policy", WRAPPER,
                              "--out-dir", str(tmp_path / "local")], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    metrics = tmp_path / "metrics.json"
    try:
        with served("--policy", WRAPPER, "--max-batch", "4", "--max-wait-ms", "100", metrics=metrics,
                    python=lerobot_python) as port:
            assert main([*common, "--policy", f"ws://127.0.0.1:{port}", "--out-dir", str(tmp_path / "ws")]) == 0
        out, err = local.communicate(timeout=600)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    assert local.returncode == 0, err[-2000:]
    versions = json.loads(out.splitlines()[0])
    assert versions["lerobot"] == "0.4.4"
    assert tuple(int(v) for v in versions["torch"].split("+")[0].split(".")[:2]) < (2, 11)
    assert tuple(int(v) for v in versions["huggingface-hub"].split(".")[:2]) < (0, 36)
    in_process, remote = _traces(tmp_path / "local"), _traces(tmp_path / "ws")
    assert sorted(in_process) == sorted(remote) and len(remote) == 4
    for key, want in in_process.items():
        got = remote[key]
        assert (got.success, got.steps) == (want.success, want.steps) and len(got.trace) == len(want.trace) > 0
        for a, b in zip(got.trace, want.trace, strict=True):  # batched in the policy vs in the server: a tolerance
            assert np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=1e-5)
    run = json.loads((tmp_path / "ws" / "episodic-eval" / "run.json").read_text())["run"]["episodic_eval"]
    assert run["served_policy"]["server_metadata"]["policy"] == "lerobot-act"
    assert run["served_policy"]["server_metadata"]["action_dim"] == 2
    histogram = json.loads(metrics.read_text())["batch_size_histogram"]
    assert any(int(size) > 1 for size in histogram), histogram
