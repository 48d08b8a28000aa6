"""Resolve a model name or local directory to a family, and load model, tokenizer and processor.

A name is a built-in tiny model (built on demand); anything else must be a local Hugging Face
model directory (no hub access). The family comes from ``config.json``: Qwen2.5-Omni (full
or thinker-only), Qwen2.5-VL, Qwen2-VL, or any causal LM as a text model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.models.tiny import MARKER, TINY_MODEL_NAMES, build_tiny_model

__all__ = ["FAMILIES", "LoadedModel", "ModelRef", "build_processor", "load_model", "resolve_model"]

# family -> human description
FAMILIES: dict[str, str] = {
    "qwen2_5_omni": "Qwen2.5-Omni (thinker + talker checkpoint; the thinker is used)",
    "qwen2_5_omni_thinker": "Qwen2.5-Omni thinker (vision + audio + text)",
    "qwen2_5_vl": "Qwen2.5-VL (vision + text)",
    "qwen2_vl": "Qwen2-VL (vision + text)",
    "causal_lm": "any causal language model (text only)",
}
MULTIMODAL_FAMILIES = frozenset({"qwen2_5_omni", "qwen2_5_omni_thinker", "qwen2_5_vl", "qwen2_vl"})
AUDIO_FAMILIES = frozenset({"qwen2_5_omni", "qwen2_5_omni_thinker"})

_MODEL_TYPE_FAMILY = {
    "qwen2_5_omni": "qwen2_5_omni",
    "qwen2_5_omni_thinker": "qwen2_5_omni_thinker",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen2_vl": "qwen2_vl",
}


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: display name, local directory, family."""

    name: str
    path: Path
    family: str

    @property
    def is_multimodal(self) -> bool:
        return self.family in MULTIMODAL_FAMILIES

    @property
    def has_audio(self) -> bool:
        return self.family in AUDIO_FAMILIES


@dataclass
class LoadedModel:
    """A model ready to run: module in eval mode, tokenizer, processor (None for text models)."""

    ref: ModelRef
    model: Any
    tokenizer: Any
    processor: Any
    device: Any
    dtype: Any


def _family_from_config(path: Path) -> str:
    cfg_path = path / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{cfg_path}: not valid JSON ({exc}); is this a model directory?") from None
    model_type = str(cfg.get("model_type", ""))
    if model_type in _MODEL_TYPE_FAMILY:
        return _MODEL_TYPE_FAMILY[model_type]
    archs = [str(a) for a in cfg.get("architectures") or []]
    if any(a.endswith("ForCausalLM") for a in archs) or ("text_config" not in cfg and model_type):
        return "causal_lm"
    raise UserError(
        f"{path}: unsupported model family (model_type '{model_type}', architectures {archs}); "
        f"supported: {', '.join(FAMILIES)}"
    )


def resolve_model(name_or_dir: str) -> ModelRef:
    """A built-in tiny model name (built on demand) or a local model directory -> ``ModelRef``."""
    if name_or_dir.startswith("shape:"):  # a shape-only model (models/shapes.py), built on first use
        from lmmbench.models.shapes import build_shape_model

        path = build_shape_model(name_or_dir)
        return ModelRef(name_or_dir, path, json.loads((path / MARKER).read_text())["family"])
    if name_or_dir in TINY_MODEL_NAMES:
        path = build_tiny_model(name_or_dir)
        family = json.loads((path / MARKER).read_text())["family"]
        return ModelRef(name_or_dir, path, family)
    path = Path(name_or_dir).expanduser()
    if not path.exists():
        raise UserError(
            f"model '{name_or_dir}' is neither a built-in model ({', '.join(TINY_MODEL_NAMES)}) nor an existing "
            "directory; give a local Hugging Face model directory (no hub downloads) or a built-in name"
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        raise UserError(f"{path}: not a model directory (no config.json); give a local Hugging Face model directory")
    return ModelRef(path.name, path.resolve(), _family_from_config(path))


def _pick_device(device: str) -> Any:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available on this machine; use --device cpu or auto")
    return torch.device(device)


def _pick_dtype(dtype: str, device: Any) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise UserError(f"unknown dtype '{dtype}'; use one of auto, {', '.join(table)}")
    return table[dtype]


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def build_processor(ref: ModelRef, tokenizer: Any) -> Any:
    """The multimodal processor, assembled from its parts (works without torchvision)."""
    if not ref.is_multimodal:
        return None
    try:  # with torchvision installed, the stock processor works as shipped
        import importlib.util

        if importlib.util.find_spec("torchvision") is not None:
            from transformers import AutoProcessor

            return AutoProcessor.from_pretrained(str(ref.path))
    except Exception:  # fall back to assembling the parts ourselves
        pass
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from lmmbench.models.video_processor import NumpyQwenVideoProcessor

    image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(ref.path))
    vcfg = _read_json(ref.path / "video_preprocessor_config.json") or _read_json(ref.path / "preprocessor_config.json")
    size = vcfg.get("size") or {}
    video_processor = NumpyQwenVideoProcessor(
        patch_size=int(vcfg.get("patch_size", 14)),
        temporal_patch_size=int(vcfg.get("temporal_patch_size", 2)),
        merge_size=int(vcfg.get("merge_size", 2)),
        min_pixels=int(vcfg.get("min_pixels", size.get("shortest_edge", 128 * 28 * 28))),
        max_pixels=int(vcfg.get("max_pixels", size.get("longest_edge", 768 * 28 * 28))),
        fps=float(vcfg.get("fps", 2.0)),
    )
    template = getattr(tokenizer, "chat_template", None)
    if ref.has_audio:
        from transformers import Qwen2_5OmniProcessor, WhisperFeatureExtractor

        fcfg = _read_json(ref.path / "feature_extractor_config.json") or _read_json(
            ref.path / "preprocessor_config.json"
        )
        keys = ("feature_size", "sampling_rate", "hop_length", "chunk_length", "n_fft", "padding_value")
        feature_extractor = WhisperFeatureExtractor(**{k: fcfg[k] for k in keys if k in fcfg})
        return _without_video_class_check(Qwen2_5OmniProcessor)(
            image_processor=image_processor,
            video_processor=video_processor,
            feature_extractor=feature_extractor,
            tokenizer=tokenizer,
            chat_template=template,
        )
    if ref.family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLProcessor as Proc
    else:
        from transformers import Qwen2VLProcessor as Proc
    return _without_video_class_check(Proc)(
        image_processor=image_processor, video_processor=video_processor, tokenizer=tokenizer, chat_template=template
    )


def _without_video_class_check(proc_cls: Any) -> Any:
    """A subclass that accepts our NumPy video processor (the stock check wants a torchvision class)."""

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if argument_name == "video_processor":
            return type(argument)
        return proc_cls.check_argument_for_proper_class(self, argument_name, argument)

    return type(proc_cls.__name__, (proc_cls,), {"check_argument_for_proper_class": check_argument_for_proper_class})


def _model_class(family: str) -> Any:
    import transformers as tf

    return {
        "qwen2_5_omni": tf.Qwen2_5OmniForConditionalGeneration,
        "qwen2_5_omni_thinker": tf.Qwen2_5OmniThinkerForConditionalGeneration,
        "qwen2_5_vl": tf.Qwen2_5_VLForConditionalGeneration,
        "qwen2_vl": tf.Qwen2VLForConditionalGeneration,
        "causal_lm": tf.AutoModelForCausalLM,
    }[family]


def load_model(name_or_dir: str, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """Load a model, its tokenizer and processor onto ``device`` (auto | cpu | cuda[:N])."""
    from lmmbench.core.errors import require

    require("torch", "models")
    require("transformers", "models")
    from transformers import AutoTokenizer

    if name_or_dir.startswith("shape:"):  # built on the target device in the target dtype
        from lmmbench.models.shapes import build_shape_model

        build_shape_model(name_or_dir, device=device, dtype=dtype)
    ref = resolve_model(name_or_dir)
    dev = _pick_device(device)
    dt = _pick_dtype(dtype, dev)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(ref.path))
    except Exception as exc:
        raise UserError(f"{ref.path}: could not load its tokenizer ({exc})") from None
    kwargs: dict[str, Any] = {"dtype": dt}
    if ref.family == "qwen2_5_omni":
        kwargs["enable_audio_output"] = False
    try:
        model = _model_class(ref.family).from_pretrained(str(ref.path), **kwargs)
    except Exception as exc:
        raise UserError(f"{ref.path}: could not load the model ({type(exc).__name__}: {exc})") from None
    if ref.family == "qwen2_5_omni":
        model = model.thinker  # the talker is not used; model.thinker.generate() works (FIELD-NOTES)
    model.to(dev)
    model.eval()
    try:
        processor = build_processor(ref, tokenizer)
    except Exception as exc:
        raise UserError(f"{ref.path}: could not build its processor ({type(exc).__name__}: {exc})") from None
    return LoadedModel(ref=ref, model=model, tokenizer=tokenizer, processor=processor, device=dev, dtype=dt)
