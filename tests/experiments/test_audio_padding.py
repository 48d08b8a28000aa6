"""audio-padding: the 'longest' path builds the same prompt and feeds the encoder the same real frames;
the findings are computed from injected rows; a short real run writes every output file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.specs.audio_padding import AudioPaddingOptions, AudioPaddingSpec, audio_padding_findings, pack_audio
from lmmbench.specs.experiment_support import synthetic_audio


@pytest.mark.parametrize("duration_s", [1.0, 3.3])
def test_longest_padding_same_ids_and_real_frames(omni: Any, duration_s: float) -> None:
    wave = synthetic_audio(duration_s, seed=1)
    default = pack_audio(omni.processor, omni.tokenizer, "Hear.", wave, "max_length")
    longest = pack_audio(omni.processor, omni.tokenizer, "Hear.", wave, "longest")
    # the processor forces 300 s of mel frames; 'longest' keeps only the real ones
    assert default.mel_frames == 30000
    assert longest.mel_frames == longest.mel_valid_frames == default.mel_valid_frames == round(duration_s * 100)
    assert default.inputs["input_ids"].tolist() == longest.inputs["input_ids"].tolist()
    n = longest.mel_frames
    a = default.inputs["input_features"][..., : n - 1]
    b = longest.inputs["input_features"][..., : n - 1]
    assert float((a - b).abs().max()) < 1e-5  # only the last frame's STFT window differs


def test_encoder_input_check(omni: Any) -> None:
    from lmmbench.specs.audio_padding import encoder_input_check

    check = encoder_input_check(omni, synthetic_audio(2.0), "Hear.")
    assert check["same_input_ids"] == 1.0
    assert check["encoder_output_tokens_default"] == check["encoder_output_tokens_longest"] == 50
    assert check["encoder_output_max_abs_diff"] < 1e-3


def test_pack_audio_rejects_unknown_padding(omni: Any) -> None:
    with pytest.raises(ValueError, match="padding"):
        pack_audio(omni.processor, omni.tokenizer, "x", synthetic_audio(1.0), "shortest")


def _row(dur: float, padding: str, feat: float, enc: float, ttft: float) -> dict[str, Any]:
    frac = 1 - dur * 100 / 30000 if padding == "max_length" else 0.0
    return {"status": "ok", "duration_s": dur, "padding": padding, "audio_feature_ms": feat,
            "audio_encoder_ms": enc, "ttft_ms": ttft, "padded_fraction": frac, "audio_tokens": dur * 25}


def test_findings_from_injected_rows() -> None:
    rows = [_row(1, "max_length", 130, 22, 60), _row(30, "max_length", 130, 22, 70),
            _row(1, "longest", 10, 2, 40), _row(30, "longest", 30, 8, 50),
            {"status": "failed", "duration_s": 1, "padding": "longest", "audio_feature_ms": 9999}]
    out = audio_padding_findings(rows)
    assert out["audio_encoder_max_length"]["variation_pct"] == pytest.approx(0.0)
    assert out["audio_encoder_longest"]["variation_pct"] == pytest.approx(300.0)
    assert out["padding_feature_ms_by_duration"][1.0] == pytest.approx(120.0)
    assert out["padding_ttft_ms_by_duration"][30.0] == pytest.approx(20.0)
    assert out["padded_fraction_default_mean"] == pytest.approx((0.9966666 + 0.9) / 2, abs=1e-5)
    assert "varies by 0 %" in out["finding"] and "varies by 300 %" in out["finding"]


def test_short_run_writes_outputs(tmp_path: Path) -> None:
    from lmmbench.sessions.spec_session import run_spec

    opts = AudioPaddingOptions(out_dir=tmp_path, repeats=1, warmup=0, durations_s=[1.0, 2.0], progress=False)
    spec_dir = run_spec(AudioPaddingSpec.name, opts).spec_dir
    for suffix in ("results.csv", "summary.csv", "plot.png", "analysis.json"):
        assert (spec_dir / f"audio-padding_{suffix}").is_file()
    assert (spec_dir / "run.json").is_file()
    analysis = json.loads((spec_dir / "audio-padding_analysis.json").read_text())
    assert analysis["rows_ok"] == 4 and analysis["rows_failed"] == 0
    assert analysis["padded_fraction_by_duration"]["max_length"]["1.0"] == pytest.approx(1 - 100 / 30000)
    assert "finding" in analysis and "padding" in analysis["finding"]
