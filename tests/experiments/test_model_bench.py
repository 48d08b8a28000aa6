"""model-bench (ByteMLPerf's bench_model.py): the loop's stop rules against injected times, the decode step's
KV cache, and ByteMLPerf's matrices from a short run on tiny-llm."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.specs.model_bench import MATRIX_CORNER, ModelBenchSpec, measure_cell


class _Clock:
    """A step whose 'measured' time is injected: every call takes ``ms``."""

    def __init__(self, ms: float) -> None:
        self.ms, self.calls, self.after = ms, 0, 0

    def time_ms(self, step: Any) -> float:
        step()
        return self.ms

    def step(self) -> None:
        self.calls += 1


@pytest.mark.parametrize(("ms", "budget_ms", "max_iters", "measured"), [
    (10.0, 25.0, 100, 3),   # the budget ends it: 10 + 10 + 10 >= 25
    (10.0, 1e9, 4, 4),      # the iteration cap ends it
    (10.0, 5.0, 100, 1),    # one forward longer than the budget: one measurement
])  # fmt: skip
def test_bytemlperf_loop_warms_up_then_stops_at_budget_or_count(ms: float, budget_ms: float, max_iters: int,
                                                                measured: int) -> None:  # fmt: skip
    clock = _Clock(ms)
    counter = {"after": 0}
    times = measure_cell(clock.step, lambda: counter.__setitem__("after", counter["after"] + 1), clock.time_ms,
                         warmup_iters=2, budget_ms=budget_ms, max_iters=max_iters)  # fmt: skip
    assert times == [ms] * measured
    assert clock.calls == counter["after"] == measured + 2  # 2 unrecorded warm-up forwards first


def test_decode_step_runs_against_a_cache_of_seq_len_tokens(llm: Any) -> None:
    import torch

    ids = torch.randint(10, int(llm.model.config.vocab_size), (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        step, after = ModelBenchSpec._step(llm, "decode", ids)
        assert after is not None
        for _ in range(3):  # the same step thrice: the cache is cut back to 12 tokens after each
            out = step().logits[:, -1].float()
            after()
        full = llm.model(input_ids=torch.cat([ids, ids[:, :1]], dim=1)).logits[:, -1].float()
    # fp32 on CPU: the cached and the whole-sequence forward differ by summation order only (~1e-6 here)
    assert torch.allclose(out, full, atol=1e-4), (out - full).abs().max()


def _matrix(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def test_model_bench_writes_bytemlperf_s_matrices(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert main(["run", "model-bench", "--model", "tiny-llm", "--seq-lens", "8,32", "--batch-sizes", "1,2,4",
                 "--budget-s", "30", "--max-iters", "3", "--warmup-iters", "1", "--threads", "1", "--no-progress",
                 "--out-dir", str(out)]) == 0  # fmt: skip
    d = out / "model-bench"
    for name, batches in (("context_perf.csv", ["1"]), ("decode_perf.csv", ["1", "2", "4"])):
        header, rows = _matrix(d / name)
        assert header == [MATRIX_CORNER, *batches]  # batch size across
        assert [r[0] for r in rows] == ["8", "32"]  # sequence length down
        assert all(float(c) > 0 for r in rows for c in r[1:]) and all(len(r) == len(header) for r in rows)
    results = list(csv.DictReader((d / "model-bench_results.csv").open()))
    assert len(results) == 2 + 6 and all(r["status"] == "ok" for r in results)
    assert all(int(r["iterations"]) == 3 for r in results)  # the budget (30 s) is not reached: --max-iters is
    decode = {(r["batch_size"], r["seq_len"]): float(r["mean_ms"]) for r in results if r["phase"] == "decode"}
    _header, rows = _matrix(d / "decode_perf.csv")
    assert float(rows[1][3]) == round(decode[("4", "32")], 3)  # the cell is the row's mean, as ByteMLPerf rounds
    lines = (d / "output.txt").read_text().splitlines()
    assert len(lines) == 8 and lines[0].startswith("context, batch_size=1, seq_len=8, avg_duration_ms=")
    config = json.loads((d / "config.json").read_text())
    assert config["perf_config"]["batch_size_list"] == [1, 2, 4] and config["perf_config"]["seq_len_list"] == [8, 32]
    assert config["timer"] == "perf_counter_ns"  # CPU here; CUDA events on CUDA (benchmarks/gpu_check.py)


def test_model_bench_phase_choice_and_bad_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "model-bench", "--model", "tiny-llm", "--seq-lens", "8", "--batch-sizes", "1", "--max-iters",
            "1", "--threads", "1", "--no-progress"]  # fmt: skip
    assert main([*base, "--phases", "decode", "--out-dir", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d/model-bench/decode_perf.csv").is_file()
    assert not (tmp_path / "d/model-bench/context_perf.csv").exists()
    assert main([*base[:4], "--seq-lens", "40000", "--out-dir", str(tmp_path / "x")]) == 2
    assert "positions" in capsys.readouterr().err
