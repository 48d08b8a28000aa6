"""Resolve a model name or local directory to a family, and load model, tokenizer and processor.

A name is a built-in tiny model (built on demand), a shape-only model (``shape:NAME``), a Hugging Face hub id
(``ORG/NAME``, ``ORG/NAME@REVISION``: resolved through the local hub cache, ``core.hub``), or a local Hugging
Face model directory. The family comes from ``config.json`` through the family
registry (``models.families``): Qwen2.5-Omni (full or thinker-only), Qwen2.5-VL, Qwen2-VL, or any
causal LM as a text model. The processor is the family's probe-checked one
(``models.processor_build``), built before the weights load so a refusal costs nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.hub import looks_like_hub_id, resolve_hub_snapshot
from lmmbench.models.families import MODEL_FAMILIES, ModelFamily, family_from_config, get_family
from lmmbench.models.processor_build import ProcessorBuild, build_family_processor
from lmmbench.models.tiny import MARKER, TINY_MODEL_NAMES, build_tiny_model

__all__ = ["LoadedModel", "ModelRef", "build_processor", "family_descriptions", "load_model", "pick_device",
           "resolve_model"]


def family_descriptions() -> dict[str, str]:
    """Family name -> description, read from ``models.families.MODEL_FAMILIES`` when called (plugins included)."""
    return {n: MODEL_FAMILIES.get(n).description for n in MODEL_FAMILIES.names()}


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: display name, local directory, family."""

    name: str
    path: Path
    family: str

    @property
    def record(self) -> ModelFamily:
        """The family's registry record."""
        return get_family(self.family)

    @property
    def is_multimodal(self) -> bool:
        return self.record.multimodal

    @property
    def has_audio(self) -> bool:
        return self.record.audio


@dataclass
class LoadedModel:
    """A model ready to run: module in eval mode, tokenizer, processor (None for text models)."""

    ref: ModelRef
    model: Any
    tokenizer: Any
    processor: Any
    device: Any
    dtype: Any
    processor_build: ProcessorBuild | None = None  # how the processor was obtained (run.json)


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
    if not path.exists() and looks_like_hub_id(name_or_dir):
        snap = resolve_hub_snapshot(name_or_dir)
        path = Path(snap.path)
        if not (path / "config.json").is_file():
            raise UserError(f"model {name_or_dir}: its snapshot {path} has no config.json (not a transformers model)")
        return ModelRef(name_or_dir, path.resolve(), family_from_config(path).name)
    if not path.exists():
        raise UserError(
            f"model '{name_or_dir}' is neither a built-in model ({', '.join(TINY_MODEL_NAMES)}), a hub id "
            "(ORG/NAME) nor an existing directory; give a local Hugging Face model directory, a hub id or a "
            "built-in name"
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        raise UserError(f"{path}: not a model directory (no config.json); give a local Hugging Face model directory")
    return ModelRef(path.name, path.resolve(), family_from_config(path).name)


def pick_device(device: str) -> Any:
    """``--device`` as a torch device (``auto``: CUDA when there is one); CUDA asked for without it is refused."""
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


def build_processor(ref: ModelRef, tokenizer: Any) -> Any:
    """The family's checked multimodal processor (None for text models); see ``models.processor_build``."""
    return build_family_processor(ref.record, ref.path, tokenizer).processor


def _model_class(family: ModelFamily) -> Any:
    import transformers

    return getattr(transformers, family.model_class)


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
    dev = pick_device(device)
    dt = _pick_dtype(dtype, dev)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(ref.path))
    except Exception as exc:
        raise UserError(f"{ref.path}: could not load its tokenizer ({exc})") from None
    family = ref.record
    try:
        proc = build_family_processor(family, ref.path, tokenizer)
    except UserError as exc:
        raise UserError(f"{ref.path}: processor refused: {exc}") from None
    except Exception as exc:
        raise UserError(f"{ref.path}: could not build its processor ({type(exc).__name__}: {exc})") from None
    try:
        model = _model_class(family).from_pretrained(str(ref.path), dtype=dt, **family.load_kwargs)
    except Exception as exc:
        raise UserError(f"{ref.path}: could not load the model ({type(exc).__name__}: {exc})") from None
    if family.submodel:
        model = getattr(model, family.submodel)  # the Omni talker is not used; thinker.generate() works
    model.to(dev)
    model.eval()
    return LoadedModel(ref=ref, model=model, tokenizer=tokenizer, processor=proc.processor, device=dev, dtype=dt,
                       processor_build=proc)
