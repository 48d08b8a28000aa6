"""benchmarks/gpu_check.py: its verdicts on known rows, and its refusal without CUDA (this machine has none)."""

from __future__ import annotations

import importlib.util
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
