"""The built-in tiny models: built offline, deterministic, loadable, runnable on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.models import build_tiny_model, load_model, resolve_model


def test_build_is_cached_and_deterministic(tmp_path: Path) -> None:
    path = build_tiny_model("tiny-llm")
    assert json.loads((path / "lmmbench_model.json").read_text())["family"] == "causal_lm"
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model("tiny-llm") == path
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime
    first = load_model("tiny-llm").model.state_dict()
    build_tiny_model("tiny-llm", force=True)
    second = load_model("tiny-llm").model.state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_tiny_llm_generates_with_chat_template() -> None:
    m = load_model("tiny-llm")
    enc = m.tokenizer.apply_chat_template(
        [{"role": "user", "content": "how many cats?"}], add_generation_prompt=True, return_tensors="pt",
        return_dict=True,
    )
    out = m.model.generate(**enc, max_new_tokens=4, do_sample=False, min_new_tokens=4)
    assert out.shape[1] == enc["input_ids"].shape[1] + 4


def test_tiny_omni_processes_video_image_audio_and_generates() -> None:
    m = load_model("tiny-omni")
    assert m.ref.family == "qwen2_5_omni_thinker" and m.processor is not None
    rng = np.random.default_rng(0)
    msgs = [{"role": "user", "content": [{"type": "video"}, {"type": "image"}, {"type": "audio"},
                                         {"type": "text", "text": "describe"}]}]
    text = m.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    inputs = m.processor(
        text=[text],
        images=[(rng.random((56, 84, 3)) * 255).astype(np.uint8)],
        videos=[(rng.random((4, 56, 56, 3)) * 255).astype(np.uint8)],
        audio=[rng.standard_normal(16000).astype(np.float32) * 0.1],
        return_tensors="pt",
    )
    ids = inputs["input_ids"]
    assert int((ids == m.tokenizer.image_token_id).sum()) > 0
    assert int((ids == m.tokenizer.video_token_id).sum()) > 0
    assert int((ids == m.tokenizer.audio_token_id).sum()) == 25  # 1 s of audio at 25 tokens/s
    with torch.no_grad():
        out = m.model.generate(**inputs, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 2


def test_tiny_vl_takes_images_and_video() -> None:
    m = load_model("tiny-vl")
    rng = np.random.default_rng(1)
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "hi"}]}]
    text = m.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    inputs = m.processor(text=[text], images=[(rng.random((56, 56, 3)) * 255).astype(np.uint8)],
                         videos=[(rng.random((2, 56, 56, 3)) * 255).astype(np.uint8)], return_tensors="pt")
    inputs.pop("video_metadata", None)
    with torch.no_grad():
        logits = m.model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape


def test_bad_model_names_and_dirs_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="neither a built-in model"):
        resolve_model("no-such-model")
    with pytest.raises(UserError, match=r"no config\.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper", "text_config": {}}))
    with pytest.raises(UserError, match="unsupported model family"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        resolve_model(str(tmp_path))


def test_models_cli_lists_and_builds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "build", "tiny-llm"]) == 0
    assert "tiny-llm" in capsys.readouterr().out
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "tiny-omni" in out and "qwen2_5_vl" in out
    assert main(["models", "build", "nope"]) == 2
