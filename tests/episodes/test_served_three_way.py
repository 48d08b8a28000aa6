"""The closed loop three ways on the same seeds (issue 57, point 4) through ``benchmarks/gpu_check.py``'s ``served``
part in its ``--cpu-smoke`` settings, which runs ``benchmarks/served_three_way.py``: ``serve-policy`` batching 4
connections, in-process ``--num-parallel 4``, and 4 serial connections to a batch-1 server. The outcomes and actions
are compared here from the runs' own trace files, not from the script's verdict."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_served_batched_in_process_and_serial_connections_give_equal_outcomes(gpu_check: Any, tmp_path: Path) -> None:
    import numpy as np

    from lmmbench.episodes.compare import read_traces

    settings = gpu_check.settings(cpu_smoke=True)
    # the last of a repeated option wins; --max-wait-ms 0: only requests already queued join a batch (before that
    # was handled, 0 served every request alone: 2768 batches of 1 seen on an H200)
    settings.served_args = [*settings.served_args, "--repeats", "1", "--max-wait-ms", "0"]
    rep = gpu_check.Reporter(tmp_path, 600.0)
    gpu_check.check_served(rep, tmp_path, settings)
    lines = (tmp_path / "verdicts.txt").read_text().splitlines()
    assert rep.failed == 0, lines
    assert any(line.startswith("PASS served:toy | outcomes equal in the three ways") for line in lines)
    assert sum(line.startswith("INFO served:toy:") for line in lines) == 3  # one line per way
    assert any(line.startswith("SKIP served:pi0") and "cpu-smoke" in line for line in lines)
    work = tmp_path / "served" / "toy"
    traces = {way: read_traces(work / f"{way}-r0" / "episodic-eval" / "episodic-eval_traces.jsonl")
              for way in ("served-batched", "in-process", "served-serial")}
    ref = traces["in-process"]
    assert len(ref) == 4
    for way in ("served-batched", "served-serial"):
        assert sorted(traces[way]) == sorted(ref)
        for key, want in ref.items():
            got = traces[way][key]
            assert (got.success, got.steps, len(got.trace)) == (want.success, want.steps, len(want.trace))
            for a, b in zip(got.trace, want.trace, strict=True):  # different batch sizes: float32 tolerance
                sent = np.asarray(a, dtype=float)
                assert np.allclose(sent, np.asarray(b, dtype=float)[: len(sent)], atol=1e-5)
    serial = json.loads((work / "served-serial-r0" / "episodic-eval" / "run.json").read_text())["run"]
    assert serial["episodic_eval"]["num_parallel"] == 1
    histograms = {k: json.loads((work / f"metrics-{k}.json").read_text())["batch_size_histogram"]
                  for k in ("batched", "serial")}
    assert set(histograms["serial"]) == {"1"} and any(int(k) > 1 for k in histograms["batched"])
    report = json.loads((tmp_path / "served_toy.json").read_text())
    for way in ("served-batched", "in-process", "served-serial"):
        wall = report["per_way"][way]["wall_ms"]
        assert 0 < wall["min"] <= wall["median"] <= wall["max"]
