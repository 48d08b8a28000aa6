"""Shape-only models: published architectures, counted on the meta device, built with random weights.

The parameter totals compared here are the ones the model cards publish (the Hub's count of the
checkpoint's tensors). For Qwen2.5-Omni the card's total covers the whole checkpoint (thinker +
talker + token2wav) while the shape is the thinker alone, so the thinker is counted from the shipped
config and the talker (its published config, kept in the data file as a reference part) and
token2wav (transformers' default config) are added before comparing with the card.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lmmbench.cli.main import main
from lmmbench.models import shapes
from lmmbench.models.shapes import count_parameters, load_shape_spec, shape_config, shape_names

# name -> the card's published total (billions) that the shape alone must match
CARD_TOTALS_B = {
    "qwen2.5-7b": 7.61,  # Qwen/Qwen2.5-7B: "Number of Parameters: 7.61B"
    "llama-3.1-8b": 8.03,  # meta-llama/Llama-3.1-8B: 8.03B
    "qwen2.5-vl-7b": 8.29,  # Qwen/Qwen2.5-VL-7B-Instruct: 8.29B
    "qwen2.5-vl-3b": 3.75,  # Qwen/Qwen2.5-VL-3B-Instruct: 3.75B
}
# Omni: the card's total is thinker + talker + token2wav
OMNI_CARD_TOTALS_B = {"qwen2.5-omni-7b": 10.7, "qwen2.5-omni-3b": 5.54}


def test_every_required_shape_is_shipped_with_its_source() -> None:
    assert set(shape_names()) >= {*CARD_TOTALS_B, *OMNI_CARD_TOTALS_B}
    for name in shape_names():
        spec = load_shape_spec(name)
        assert spec.source.split()[0].count("/") == 1, spec.source  # an org/model card id
        assert spec.config["model_type"]


@pytest.mark.parametrize("name", sorted(CARD_TOTALS_B))
def test_shape_parameters_on_meta_match_the_card_total_within_1pct(name: str) -> None:
    total = count_parameters(load_shape_spec(name)) / 1e9
    assert abs(total - CARD_TOTALS_B[name]) / CARD_TOTALS_B[name] < 0.01, total


@pytest.mark.parametrize("name", sorted(OMNI_CARD_TOTALS_B))
def test_omni_thinker_plus_published_talker_matches_the_card_total_within_1pct(name: str) -> None:
    import transformers as tf

    spec = load_shape_spec(name)
    thinker = count_parameters(spec)
    talker_cfg = tf.Qwen2_5OmniTalkerConfig(**spec.reference_parts["talker_config"])
    with torch.device("meta"):
        talker = tf.Qwen2_5OmniTalkerForConditionalGeneration._from_config(talker_cfg)
        token2wav = tf.Qwen2_5OmniToken2WavModel._from_config(tf.Qwen2_5OmniToken2WavConfig())
    total = (thinker + sum(p.numel() for p in talker.parameters())
             + sum(p.numel() for p in token2wav.parameters())) / 1e9
    card = OMNI_CARD_TOTALS_B[name]
    assert abs(total - card) / card < 0.01, total
    assert thinker / 1e9 < card - 0.3  # the shape itself is the thinker only: no talker weights


def test_omni_7b_thinker_without_its_audio_tower_is_qwen2_5_vl_7b() -> None:
    """Same LLM and vision tower as Qwen2.5-VL-7B, whose card publishes 8.29 B."""
    import transformers as tf

    spec = load_shape_spec("qwen2.5-omni-7b")
    with torch.device("meta"):
        model = tf.Qwen2_5OmniThinkerForConditionalGeneration._from_config(shape_config(spec))
    without_audio = sum(p.numel() for n, p in model.named_parameters() if ".audio_tower." not in f".{n}")
    assert abs(without_audio / 1e9 - 8.29) / 8.29 < 0.01


def test_models_shapes_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "shapes"]) == 0
    out = capsys.readouterr().out
    for name in ("qwen2.5-omni-7b", "qwen2.5-omni-3b", "qwen2.5-vl-7b", "qwen2.5-vl-3b", "qwen2.5-7b", "llama-3.1-8b"):
        assert f"shape:{name}" in out
    assert "Qwen/Qwen2.5-Omni-7B" in out and "random weights" in out.lower()


def test_full_7b_fp32_build_is_refused_up_front_mocked_24gib_memory(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The machine's free memory is fixed at 24 GiB (what this kind of box has): 7.6 B x 4 bytes does not fit."""
    monkeypatch.setattr(shapes, "_available_bytes", lambda device: 24 * 1024**3)
    out = tmp_path / "q7"
    code = main(["models", "build", "shape:qwen2.5-7b", "--device", "cpu", "--dtype", "float32", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "7.62 B parameters in float32" in err and "28.4 GiB" in err and "24.0 GiB free" in err
    assert not out.exists() and not list(tmp_path.iterdir())  # refused before writing anything


@pytest.mark.parametrize("name", ["qwen2.5-omni-7b", "qwen2.5-vl-3b", "llama-3.1-8b"])
def test_shape_tokenizer_special_token_ids_equal_the_config_ids(name: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    spec = load_shape_spec(name)
    shapes._save_tokenizer(spec, tmp_path)
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    for token_id, token in spec.special_tokens.items():
        assert tok.convert_tokens_to_ids(token) == token_id
    cfg = spec.config
    if name == "qwen2.5-omni-7b":
        assert (tok.image_token_id, tok.video_token_id, tok.audio_token_id) == (
            cfg["image_token_index"], cfg["video_token_index"], cfg["audio_token_index"])
        assert tok.convert_tokens_to_ids("<|vision_bos|>") == cfg["vision_start_token_id"]
        assert tok.convert_tokens_to_ids("<|audio_bos|>") == cfg["audio_start_token_id"]
    if name == "qwen2.5-vl-3b":
        assert (tok.image_token_id, tok.video_token_id) == (cfg["image_token_id"], cfg["video_token_id"])
    ids = tok("count the red circles")["input_ids"]
    assert ids and max(ids) < min(spec.special_tokens)  # text stays in the ordinary (low) ids
    assert max(spec.special_tokens) < int(cfg.get("vocab_size", cfg.get("text_config", {}).get("vocab_size", 0)))


@pytest.fixture(scope="module")
def omni_3b_one_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """shape:qwen2.5-omni-3b with every tower cut to 1 layer (real vocabulary), bf16 on disk."""
    out = tmp_path_factory.mktemp("shape") / "omni3b-L1"
    assert main(["models", "build", "shape:qwen2.5-omni-3b", "--num-layers", "1", "--device", "cpu",
                 "--dtype", "bfloat16", "--out", str(out)]) == 0
    return out


def test_reduced_shape_cuts_every_tower_and_keeps_the_vocabulary(omni_3b_one_layer: Path) -> None:
    cfg = json.loads((omni_3b_one_layer / "config.json").read_text())
    assert cfg["text_config"]["num_hidden_layers"] == 1
    assert cfg["vision_config"]["depth"] == 1 and cfg["audio_config"]["encoder_layers"] == 1
    assert cfg["text_config"]["vocab_size"] == 151936 and cfg["text_config"]["hidden_size"] == 2048
    marker = json.loads((omni_3b_one_layer / "lmmbench_model.json").read_text())
    assert marker["random_weights"] is True and marker["num_layers"] == 1 and marker["talker_loaded"] is False


def test_reduced_omni_shape_breakdown_on_cpu_has_media_tokens_and_says_random(
        omni_3b_one_layer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "ttft-breakdown", "--model", str(omni_3b_one_layer), "--limit", "1", "--repeats", "1",
                 "--warmup", "0", "--device", "cpu", "--dtype", "float32", "--threads", "2", "--no-progress",
                 "--out-dir", str(tmp_path)])
    assert code == 0
    assert "weights: RANDOM" in capsys.readouterr().out
    spec_dir = tmp_path / "ttft-breakdown"
    import csv

    rows = list(csv.DictReader((spec_dir / "ttft-breakdown_results.csv").open()))
    assert rows and all(r["status"] == "ok" for r in rows)
    for r in rows:
        if "video" in r["modalities"] or "image" in r["modalities"]:
            assert int(r["visual_tokens"]) > 1
        if "audio" in r["modalities"]:
            assert int(r["audio_tokens"]) > 0 and int(r["mel_frames"]) > 0
    run = json.loads((spec_dir / "run.json").read_text())
    assert run["measurement"]["random_weights"] is True
    assert run["run"]["model_weights"]["name"] == "shape:qwen2.5-omni-3b"
    assert json.loads((spec_dir / "ttft-breakdown_analysis.json").read_text())["random_weights"] is True
    assert "RANDOM WEIGHTS" in (spec_dir / "report.html").read_text()


def test_eval_refuses_a_shape_model_unless_forced(omni_3b_one_layer: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "--model", str(omni_3b_one_layer), "--tasks", "sample_mc", "--out-dir", str(tmp_path)])
    assert code == 2
    assert "--allow-random-weights" in capsys.readouterr().err
