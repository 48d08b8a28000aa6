"""The built-in tiny models, built offline from configs with random weights and a fixed seed.

``tiny-llm`` (Qwen2 text), ``tiny-vl`` (Qwen2.5-VL) and ``tiny-omni`` (Qwen2.5-Omni thinker:
vision + audio + text) share one locally trained tokenizer. Each is a few MB and is built once
into ``$LMMBENCH_HOME/models/<name>`` (default ``~/.cache/lmmbench/models/<name>``); the
directory is an ordinary Hugging Face model directory, loadable by transformers directly.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["TINY_MODEL_NAMES", "build_tiny_model", "lmmbench_home", "tiny_model_dir"]

TINY_MODEL_NAMES: tuple[str, ...] = ("tiny-llm", "tiny-vl", "tiny-omni")
TINY_FAMILIES = {"tiny-llm": "causal_lm", "tiny-vl": "qwen2_5_vl", "tiny-omni": "qwen2_5_omni_thinker"}
TINY_DESCRIPTIONS = {
    "tiny-llm": "Qwen2 causal LM, text only",
    "tiny-vl": "Qwen2.5-VL: vision encoder + text LLM (images, video)",
    "tiny-omni": "Qwen2.5-Omni thinker: vision + audio encoders + text LLM (video with audio, images, audio)",
}
MARKER = "lmmbench_model.json"
SEED = 1234
VOCAB = 1024
# Bump when a tiny model's definition changes, so cached copies are rebuilt.
BUILD_VERSION = 1


def lmmbench_home() -> Path:
    """Where lmmbench caches built models and synthetic media (``$LMMBENCH_HOME``)."""
    env = os.environ.get("LMMBENCH_HOME")
    home = Path(env).expanduser() if env else Path.home() / ".cache" / "lmmbench"
    if home.exists() and not home.is_dir():
        from lmmbench.core.errors import UserError

        raise UserError(f"LMMBENCH_HOME={home}: a file, not a folder; point LMMBENCH_HOME at a folder (or unset it)")
    return home


def tiny_model_dir(name: str) -> Path:
    """The cache directory of a built-in tiny model."""
    return lmmbench_home() / "models" / name


def _text_config(tok: Any, head_dim: int = 16, mrope: bool = False) -> dict[str, Any]:
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": 1000000.0}
    if mrope:
        rope["mrope_section"] = [2, 3, 3]  # sums to head_dim / 2
    return {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": head_dim,
        "max_position_embeddings": 32768,
        "rope_parameters": rope,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }


def _vision_config() -> dict[str, Any]:
    return {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [1],
    }


def _build_llm(tok: Any) -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(**_text_config(tok)))


def _build_vl(tok: Any) -> Any:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    cfg = Qwen2_5_VLConfig(
        text_config=_text_config(tok, mrope=True),
        vision_config=_vision_config(),
        image_token_id=tok.image_token_id,
        video_token_id=tok.video_token_id,
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_bos|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_eos|>"),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return Qwen2_5_VLForConditionalGeneration(cfg)


def _build_omni(tok: Any) -> Any:
    from transformers import Qwen2_5OmniThinkerConfig, Qwen2_5OmniThinkerForConditionalGeneration

    cfg = Qwen2_5OmniThinkerConfig(
        text_config=_text_config(tok, mrope=True),
        vision_config=_vision_config(),
        audio_config={
            "num_mel_bins": 128,
            "encoder_layers": 2,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "d_model": 32,
            "output_dim": 64,
            "n_window": 100,
            "max_source_positions": 1500,
        },
        audio_token_index=tok.audio_token_id,
        image_token_index=tok.image_token_id,
        video_token_index=tok.video_token_id,
        audio_start_token_id=tok.convert_tokens_to_ids("<|audio_bos|>"),
        audio_end_token_id=tok.convert_tokens_to_ids("<|audio_eos|>"),
        user_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
        # read by get_rope_index, not a declared config field (FIELD-NOTES)
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_bos|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_eos|>"),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        position_id_per_seconds=25,
        seconds_per_chunk=2,
    )
    return Qwen2_5OmniThinkerForConditionalGeneration(cfg)


_BUILDERS = {"tiny-llm": _build_llm, "tiny-vl": _build_vl, "tiny-omni": _build_omni}


def _save_processor_parts(name: str, out: Path) -> None:
    """Save the image processor, video processor and feature extractor configs beside the model."""
    if name == "tiny-llm":
        return
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    Qwen2VLImageProcessorPil().save_pretrained(str(out))
    video = {
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "min_pixels": 128 * 28 * 28,
        "max_pixels": 768 * 28 * 28,
        "fps": 2.0,
    }
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    if name == "tiny-omni":
        from transformers import WhisperFeatureExtractor

        fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, chunk_length=300, hop_length=160)
        fe_dict = fe.to_dict()
        fe_dict.pop("mel_filters", None)
        (out / "feature_extractor_config.json").write_text(json.dumps(fe_dict, indent=2, default=str))


def build_tiny_model(name: str, force: bool = False) -> Path:
    """Build (once) and return the directory of built-in tiny model ``name``."""
    from lmmbench.core.errors import UserError

    if name not in _BUILDERS:
        raise UserError(f"unknown built-in model '{name}'; built-in models: {', '.join(TINY_MODEL_NAMES)}")
    out = tiny_model_dir(name)
    marker = out / MARKER
    if not force and marker.is_file():
        try:
            if json.loads(marker.read_text()).get("build_version") == BUILD_VERSION:
                return out
        except (OSError, json.JSONDecodeError):
            pass
    import torch

    from lmmbench.models.tokenizer_build import build_tokenizer

    tmp = out.with_name(f".{name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = build_tokenizer(tmp, vocab_size=VOCAB)
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        model = _BUILDERS[name](tok)
    model.eval()
    model.save_pretrained(str(tmp))
    gen_cfg = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "do_sample": False}
    (tmp / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2))
    _save_processor_parts(name, tmp)
    info = {"name": name, "family": TINY_FAMILIES[name], "seed": SEED, "build_version": BUILD_VERSION}
    (tmp / MARKER).write_text(json.dumps(info, indent=2))
    if out.exists():
        shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # another process built it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return out
