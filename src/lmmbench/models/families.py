"""The model-family registry: one record per family, in one place.

A ``ModelFamily`` says how a family is detected from ``config.json`` (its ``model_type``), which
transformers class loads it, which media it takes, how its processor is assembled from parts
(``models.processor_build.PROCESSOR_PARTS``, by name), and which hook layout
(``profiling.families.HOOK_LAYOUTS``, by name: ``models`` and ``profiling`` are sibling layers)
finds its stage modules. Everything else (shapes, loading) reads these fields, so a new family is
this one registration plus, where it needs them, a parts builder and a hook layout under the names
it gives. Third-party packages add families through the ``lmmbench.model_families`` entry-point
group (docs/extending.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry

__all__ = ["MODEL_FAMILIES", "ModelFamily", "family_from_config", "family_of_model_type", "get_family"]


@dataclass(frozen=True)
class ModelFamily:
    """Everything lmmbench knows about one model family."""

    name: str
    description: str
    model_class: str  # a transformers class name (``from_pretrained`` loads the checkpoint)
    model_types: tuple[str, ...] = ()  # config.json ``model_type`` values that select this family
    vision: bool = False
    audio: bool = False
    parts: str = ""  # processor assembled from parts: a processor_build.PROCESSOR_PARTS name ("" = text model)
    processor_class: str = ""  # the transformers processor class the parts go into
    hook_layout: str = "causal_lm"  # a profiling.families.HOOK_LAYOUTS name
    submodel: str = ""  # the attribute generate() runs on (the Omni thinker), "" = the model itself
    load_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def multimodal(self) -> bool:
        return self.vision or self.audio


MODEL_FAMILIES: Registry[ModelFamily] = Registry("model_families")

for _family in (
    ModelFamily(
        name="qwen2_5_omni",
        description="Qwen2.5-Omni (thinker + talker checkpoint; the thinker is used)",
        model_class="Qwen2_5OmniForConditionalGeneration",
        model_types=("qwen2_5_omni",),
        vision=True, audio=True, parts="qwen_omni", processor_class="Qwen2_5OmniProcessor",
        hook_layout="qwen2_5_omni", submodel="thinker", load_kwargs={"enable_audio_output": False},
    ),
    ModelFamily(
        name="qwen2_5_omni_thinker",
        description="Qwen2.5-Omni thinker (vision + audio + text)",
        model_class="Qwen2_5OmniThinkerForConditionalGeneration",
        model_types=("qwen2_5_omni_thinker",),
        vision=True, audio=True, parts="qwen_omni", processor_class="Qwen2_5OmniProcessor",
        hook_layout="qwen2_5_omni_thinker",
    ),
    ModelFamily(
        name="qwen2_5_vl",
        description="Qwen2.5-VL (vision + text)",
        model_class="Qwen2_5_VLForConditionalGeneration",
        model_types=("qwen2_5_vl",),
        vision=True, parts="qwen_vl", processor_class="Qwen2_5_VLProcessor", hook_layout="qwen2_5_vl",
    ),
    ModelFamily(
        name="qwen2_vl",
        description="Qwen2-VL (vision + text)",
        model_class="Qwen2VLForConditionalGeneration",
        model_types=("qwen2_vl",),
        vision=True, parts="qwen_vl", processor_class="Qwen2VLProcessor", hook_layout="qwen2_vl",
    ),
    ModelFamily(
        name="causal_lm",
        description="any causal language model (text only)",
        model_class="AutoModelForCausalLM",
    ),
):
    MODEL_FAMILIES.add(_family.name, _family)


def get_family(name: str) -> ModelFamily:
    """The registered family ``name`` (a one-line error naming the known ones otherwise)."""
    return MODEL_FAMILIES.get(name)


def family_of_model_type(model_type: str) -> ModelFamily | None:
    """The registered family whose ``model_types`` include ``model_type`` (None when none does)."""
    for name in MODEL_FAMILIES.names():
        family = MODEL_FAMILIES.get(name)
        if model_type and model_type in family.model_types:
            return family
    return None


def family_from_config(path: Path) -> ModelFamily:
    """The family of the model directory ``path``, from its ``config.json``."""
    cfg_path = path / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{cfg_path}: not valid JSON ({exc}); is this a model directory?") from None
    model_type = str(cfg.get("model_type", ""))
    family = family_of_model_type(model_type)
    if family is not None:
        return family
    archs = [str(a) for a in cfg.get("architectures") or []]
    if any(a.endswith("ForCausalLM") for a in archs) or ("text_config" not in cfg and model_type):
        return MODEL_FAMILIES.get("causal_lm")
    raise UserError(
        f"{path}: unsupported model family (model_type '{model_type}', architectures {archs}); "
        f"supported: {', '.join(MODEL_FAMILIES.names())}"
    )
