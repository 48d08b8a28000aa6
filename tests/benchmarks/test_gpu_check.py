"""benchmarks/gpu_check.py: its verdicts on known rows, and its refusal without CUDA (this machine has none)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def _row(**kw: Any) -> dict[str, str]:
    base = {"status": "ok", "sample_id": "s", "modalities": "video+video-audio-track", "visual_tokens": "140",
            "audio_tokens": "26", "mel_frames": "30000", "timer": "cuda_event", "visual_encoder_ms": "10",
            "audio_encoder_ms": "5", "prefill_ms": "20", "others_ms": "5", "others_cache_setup_ms": "3",
            "others_unattributed_ms": "2", "ttft_ms": "40", "unattributed_pct": "5"}
    return {**base, **{k: str(v) for k, v in kw.items()}}


def _status(verdicts: list[Any], name: str) -> str:
    return next(v.status for v in verdicts if v.name.startswith(name))


def test_a_video_row_with_the_lone_placeholder_fails_the_media_verdict(gpu_check: Any) -> None:
    vs = gpu_check.breakdown_verdicts("c", [_row(), _row(visual_tokens=1)], {}, "cuda_event")
    assert _status(vs, "media tokens") == "FAIL"
    vs = gpu_check.breakdown_verdicts("c", [_row(), _row(sample_id="t")], {}, "cuda_event")
    assert _status(vs, "media tokens") == "PASS" and _status(vs, "timer") == "PASS"


def test_stage_sums_and_unattributed_verdicts(gpu_check: Any) -> None:
    vs = gpu_check.breakdown_verdicts("c", [_row()], {}, "cuda_event")
    assert _status(vs, "stage sums exact") == "PASS" and _status(vs, "unattributed") == "PASS"
    vs = gpu_check.breakdown_verdicts("c", [_row(ttft_ms=41, unattributed_pct=6)], {}, "perf_counter_ns")
    assert _status(vs, "stage sums exact") == "FAIL" and _status(vs, "unattributed") == "FAIL"
    assert _status(vs, "timer") == "FAIL"  # a CUDA run must use CUDA events
    # the goal is judged on the per-sample medians (the spec's analysis) when they are there
    analysis = {"unattributed": {"max_pct_per_sample": 4.0}}
    assert _status(gpu_check.breakdown_verdicts("c", [_row(unattributed_pct=6)], analysis, "cuda_event"),
                   "unattributed") == "PASS"


def test_prefill_parts_and_the_study_style_timer_verdicts(gpu_check: Any) -> None:
    parts = {"llm_prefill_ms": 12, "prefill_merge_ms": 4, "prefill_rope_index_ms": 2, "prefill_lm_head_ms": 2,
             "prefill_forward_glue_ms": "", "prefill_outside_forward_ms": 2, "prefill_study_timer_ms": 18.01}
    vs = gpu_check.breakdown_verdicts("c", [_row(**parts)], {}, "cuda_event")  # empty glue: no wrapper
    assert _status(vs, "stage sums exact") == "PASS" and _status(vs, "study-style prefill timer") == "PASS"
    vs = gpu_check.breakdown_verdicts("c", [_row(**{**parts, "prefill_merge_ms": 5, "prefill_study_timer_ms": 20})],
                                      {}, "cuda_event")
    assert _status(vs, "stage sums exact") == "FAIL"  # the parts no longer sum to prefill_ms
    assert _status(vs, "study-style prefill timer") == "FAIL"  # 20 against 20 - 2 inside the forward


def test_without_cuda_it_refuses_with_exit_2(gpu_check: Any, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot happen here")
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_pi0_check_runs_on_cpu_with_the_tiny_shape_eager_only(gpu_check: Any, tmp_path: Path) -> None:
    """The pi0 check's code path on CPU (pi0-tiny, float32, N = 1 and 2): eager ms per call with its spread, the
    graphed half SKIPPED with its reason (no CUDA here), the traffic bound from the given bandwidth, the JSON."""
    settings = gpu_check.settings(cpu_smoke=True)
    settings.pi0_repeats = 2
    settings.extra["bandwidth_tb_s"] = 0.05
    rep = gpu_check.Reporter(tmp_path, 600.0)
    gpu_check.check_pi0(rep, tmp_path, settings)
    lines = (tmp_path / "verdicts.txt").read_text().splitlines()
    assert any(line.startswith("INFO pi0 | card bandwidth: cpu: 0.05 TB/s (--bandwidth-tb-s)") for line in lines)
    assert sum(line.startswith("SKIP pi0:N=") and "need a CUDA device" in line for line in lines) == 2
    data = json.loads((tmp_path / "pi0_ae_calls.json").read_text())
    assert data["shape"] == "pi0-tiny" and [r["batch_size"] for r in data["rows"]] == [1, 2]
    for r in data["rows"]:
        e = r["eager_ms"]
        assert 0 < e["min"] <= e["median"] <= e["max"] and r["graphed_ms"]["median"] is None
        assert r["speedup"] is None and r["max_abs_diff"] is None  # unmeasured is null, never 0
        assert r["bound_ms"] == pytest.approx((r["weight_bytes"] + r["kv_bytes"]) / 0.05e12 * 1e3)
        assert r["eager_ratio_to_bound"] == pytest.approx(e["median"] / r["bound_ms"])
    assert rep.failed == 0


def test_pi0_traffic_bound_counts_the_bytes_a_call_must_read() -> None:
    """pi0-tiny in float32 at batch 2, one camera, counted by hand: the prefix cache has 64 image tokens
    ((112 / 14)²) + 64 instruction + 3 = 131 tokens; keys and values (2) of 1 head of 16, 2 layers, read at each
    of the 10 steps, 4 bytes: 2·2·1·131·16·2·10·4 B. Weights: every prefix parameter but the embedding table (its
    2·64 rows of width 128 instead), plus the expert's parameters 10 times."""
    from lmmbench.models.vla import PI0_TINY, build_vla
    from lmmbench.models.vla_bench import ae_traffic_bytes

    model = build_vla(PI0_TINY)
    got = ae_traffic_bytes(model, batch=2, cameras=1, dtype_bytes=4)
    assert got["kv"] == 2 * 2 * 1 * 131 * 16 * 2 * 10 * 4
    named = dict(model.named_parameters())
    prefix = sum(p.numel() for n, p in named.items() if n.startswith("prefix.") and n != "prefix.embed.weight")
    expert = sum(p.numel() for n, p in named.items() if n.startswith("action_expert."))
    assert got["weights"] == 4 * (prefix + 2 * 64 * 128 + 10 * expert)


def test_card_bandwidth_table_and_pi0_verdicts(gpu_check: Any) -> None:
    from lmmbench.models.vla_bench import card_bandwidth_tb_s

    assert card_bandwidth_tb_s("NVIDIA H200") == 4.8
    assert card_bandwidth_tb_s("NVIDIA H100 80GB HBM3") == 3.35
    assert card_bandwidth_tb_s("NVIDIA A100-SXM4-80GB") == 2.0
    assert card_bandwidth_tb_s("NVIDIA H100 PCIe") is None and card_bandwidth_tb_s("Tesla T4") is None
    row = {"batch_size": 1, "eager_ms": {"median": 100.0, "min": 96.0, "max": 184.0},
           "graphed_ms": {"median": 10.0, "min": 9.0, "max": 11.0}, "graph_setup_ms": 500.0, "speedup": 10.0,
           "max_abs_diff": 0.0, "weight_bytes": 11e9, "kv_bytes": 6e7, "bound_ms": 2.3,
           "eager_ratio_to_bound": 43.5, "graphed_ratio_to_bound": 4.35}
    assert [v.status for v in gpu_check.pi0_verdicts([row], None)] == ["INFO", "PASS"]
    assert [v.status for v in gpu_check.pi0_verdicts([{**row, "max_abs_diff": 1e-3}], None)] == ["INFO", "FAIL"]
    assert [v.status for v in gpu_check.pi0_verdicts([row], "no CUDA")] == ["INFO", "SKIP"]


def test_libero_workers_part_skips_without_libero_and_reports_speed_ups_per_repeat(gpu_check: Any,
                                                                                     tmp_path: Path) -> None:
    """The episodic part: SKIP naming what cannot be imported (the lent GPU image lacks LIBERO; here a module that
    does not exist stands for it), and per point the speed-ups against the W = 0 run of the same repeat."""
    episodic = gpu_check.load_sibling("gpu_check_episodic")
    assert episodic.missing_modules(["json", "no_such_module_h56m"]) == ["no_such_module_h56m"]
    lines = list(episodic.run_libero_workers(tmp_path, "cuda", False, lambda: 1e9,
                                             needs=("json", "no_such_module_h56m")))
    assert [(s, c) for s, c, _, _ in lines] == [("SKIP", "libero-workers")] and "no_such_module_h56m" in lines[0][3]
    assert episodic.grid(False, cores=2).workers == (0, 2) and episodic.grid(False, cores=16).workers == (0, 2, 16)
    # 16 cores: W = 16 runs as W = N (at most N workers start); 2 cores: W = 2 and the core count are one point;
    # N = 1 only in process (episodic-eval runs one slot there whatever --env-workers says)
    assert episodic._bench().grid_points([1, 4, 8], [0, 2, 16]) == [(1, 0), (4, 0), (4, 2), (4, 4), (8, 0), (8, 2),
                                                                    (8, 8)]
    assert episodic._bench().grid_points([1, 4], [0, 2, 2]) == [(1, 0), (4, 0), (4, 2)]

    def run(repeat: int, steps_s: float, env_s: float) -> dict[str, Any]:
        parts = {p: 1000.0 for p in ("env_ms", "env_build_ms", "env_reset_ms", "env_workers_start_ms", "planning_ms",
                                      "action_ms", "scheduler_ms")}
        return {"repeat": repeat, "steps_per_s": steps_s, "env_steps_per_s": env_s, "wall_s": 7.0, "process_s": 9.0,
                "env_step_ms": 500.0,
                "peak_rss_mb": 2048.0, "load_before": "1", "load_after": "2", **parts}

    # repeat 1's W = 0 run failed: W = 2's repeat 1 has nothing to pair with; repeat 0 and 2 give 2x and 3x
    runs = {(4, 0): [run(0, 1.0, 2.0), run(2, 1.0, 1.0)], (4, 2): [run(0, 2.0, 2.0), run(1, 9.0, 9.0),
                                                                    run(2, 3.0, 1.5)]}
    rows = {(r["slots"], r["workers"]): r for r in episodic._bench().summarise(runs)}
    assert rows[(4, 0)]["speedup_steps_per_s"] is None
    assert rows[(4, 2)]["speedup_steps_per_s"] == {"median": 2.5, "min": 2.0, "max": 3.0}
    assert rows[(4, 2)]["speedup_env_steps_per_s"] == {"median": 1.25, "min": 1.0, "max": 1.5}
    status, check, _, detail = episodic.point_line(rows[(4, 2)])
    assert (status, check) == ("INFO", "libero-workers:N=4,W=2") and "vs W=0 2.50x (2.00..3.00)" in detail
