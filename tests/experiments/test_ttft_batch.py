"""ttft-batch: batched packing equals per-sample packing, the per-request arithmetic, findings from injected
rows, and a short real run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.specs.ttft_batch import TTFTBatchOptions, pack_many, ttft_batch_findings


def test_batch_packing_is_the_left_padded_stack_of_single_packs(omni: Any) -> None:
    from lmmbench.media.extract import ExtractedAV
    from lmmbench.specs.experiment_support import synthetic_audio, synthetic_frames

    samples = [("Describe.", ExtractedAV(frames=synthetic_frames(2, 56, 56), audio=synthetic_audio(1.0))),
               ("What is going on here?", ExtractedAV(frames=synthetic_frames(4, 84, 84, seed=2),
                                                      audio=synthetic_audio(2.0, seed=2)))]
    batch = pack_many(omni, samples, fps=2.0)
    ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    assert ids.shape[0] == 2 and int(mask[0, 0]) == 0  # the shorter row is left-padded
    for i, sample in enumerate(samples):
        single = pack_many(omni, [sample], fps=2.0).inputs["input_ids"][0]
        assert ids[i][mask[i].bool()].tolist() == single.tolist()
    assert batch.audio_feature_ms > 0


def _rows(mode: str, n: int, ttft: float, req: float) -> list[dict[str, Any]]:
    return [{"status": "ok", "mode": mode, "n_inputs": n, "ttft_ms": ttft + r, "mean_request_ttft_ms": req,
             "mean_request_e2e_ms": req + 5, "inputs_per_s": 1.0, "padded_tokens": 10 if mode == "batch" else 0,
             "pack_ms": 3, "visual_encoder_ms": 1, "audio_encoder_ms": 1, "prefill_ms": 2, "others_ms": 1}
            for r in (0, 1, 2)]


def test_findings_from_injected_rows() -> None:
    rows = _rows("batch", 4, 100.0, 101.0) + _rows("sequential", 4, 300.0, 200.0)
    out = ttft_batch_findings(rows)
    entry = out["per_n"]["4"]
    assert entry["ttft_speedup"] == pytest.approx(301 / 101)
    assert entry["mean_request_ttft_change_pct"] == pytest.approx(-49.5)
    assert entry["padded_tokens_batch"] == 10
    assert out["finding"].startswith("N=4: one batch 101.0 ms vs 301.0 ms")


def test_short_run_writes_outputs(tmp_path: Path) -> None:
    import csv

    from lmmbench.sessions.spec_session import run_spec
    from lmmbench.specs.ttft_batch import TTFTBatchSpec

    opts = TTFTBatchOptions(out_dir=tmp_path, repeats=1, warmup=0, num_inputs=[2], max_frames=4, progress=False)
    spec_dir = run_spec(TTFTBatchSpec.name, opts).spec_dir
    analysis = json.loads((spec_dir / "ttft-batch_analysis.json").read_text())
    assert analysis["rows_ok"] == 2
    assert analysis["first_token_check"]["same_first_tokens"] is True
    with (spec_dir / "ttft-batch_results.csv").open() as fh:
        rows = {r["mode"]: r for r in csv.DictReader(fh)}
    b, s = rows["batch"], rows["sequential"]
    # in a batch every request gets its first token with the batch; sequentially the last waits for all
    assert float(b["mean_request_ttft_ms"]) == pytest.approx(float(b["ttft_ms"]))
    assert float(s["last_request_ttft_ms"]) == pytest.approx(float(s["ttft_ms"]))
    assert float(s["mean_request_ttft_ms"]) < float(s["ttft_ms"])
    assert int(s["padded_tokens"]) == 0
    assert (spec_dir / "ttft-batch_plot.png").is_file()
