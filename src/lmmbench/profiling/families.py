"""Where the stages of each model family live, across transformers 4.x and 5.x module paths.

A ``ModuleLayout`` lists, per role, candidate attribute paths relative to the model that
``generate()`` is called on (for Qwen2.5-Omni: the Thinker); the first path that exists wins.
transformers 5.x moved the text LLM to ``model.language_model`` and the encoders to
``model.visual`` / ``model.audio_tower`` (``model`` is then the multimodal wrapper); 4.x kept
them on the top model with ``model`` being the text LLM. Third-party packages add layouts
through the ``lmmbench.hook_layouts`` entry-point group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lmmbench.core.registry import Registry

__all__ = ["HOOK_LAYOUTS", "ModuleLayout", "ResolvedModules", "detect_family", "resolve_modules"]


@dataclass(frozen=True)
class ModuleLayout:
    """Candidate attribute paths of each stage module of one model family."""

    family: str
    visual: tuple[str, ...] = ()
    audio: tuple[str, ...] = ()
    llm: tuple[str, ...] = ("model.language_model", "model", "transformer", "language_model")
    lm_head: tuple[str, ...] = ("lm_head",)
    generation_model: tuple[str, ...] = ()  # e.g. "thinker" for a full Omni model
    multimodal: bool = False
    class_markers: tuple[str, ...] = ()  # all in a model's class name: this layout (the most markers win)


HOOK_LAYOUTS: Registry[ModuleLayout] = Registry("hook_layouts")

_OMNI = ModuleLayout(
    family="qwen2_5_omni_thinker",
    visual=("model.visual", "visual"),
    audio=("model.audio_tower", "audio_tower"),
    llm=("model.language_model", "model"),
    multimodal=True,
    class_markers=("Omni", "Thinker"),
)
HOOK_LAYOUTS.add(_OMNI.family, _OMNI)
HOOK_LAYOUTS.add("qwen2_5_omni", ModuleLayout(
    family="qwen2_5_omni", visual=_OMNI.visual, audio=_OMNI.audio, llm=_OMNI.llm,
    generation_model=("thinker",), multimodal=True, class_markers=("Omni",),
))
for _name, _marker in (("qwen2_5_vl", "Qwen2_5_VL"), ("qwen2_vl", "Qwen2VL")):
    HOOK_LAYOUTS.add(_name, ModuleLayout(
        family=_name, visual=("model.visual", "visual"), llm=("model.language_model", "model"), multimodal=True,
        class_markers=(_marker,),
    ))
HOOK_LAYOUTS.add("causal_lm", ModuleLayout(family="causal_lm"))
# any other multimodal model: the usual attribute names of vision / audio towers (LLaVA, Gemma 3, ...)
HOOK_LAYOUTS.add("generic_multimodal", ModuleLayout(
    family="generic_multimodal",
    visual=("model.visual", "visual", "model.vision_tower", "vision_tower", "model.vision_model", "vision_model"),
    audio=("model.audio_tower", "audio_tower", "model.audio_model", "audio_model"),
    llm=("model.language_model", "language_model", "model"),
    multimodal=True,
))


@dataclass
class ResolvedModules:
    """The stage modules found on one model (None where a model has no such stage)."""

    family: str
    generation_model: Any
    visual: Any | None
    audio: Any | None
    wrapper: Any | None  # the multimodal wrapper around the LLM (transformers 5.x), if any
    llm: Any | None
    lm_head: Any | None
    paths: dict[str, str]
    multimodal: bool


def _get_path(root: Any, path: str) -> Any | None:
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _first(root: Any, candidates: tuple[str, ...]) -> tuple[Any | None, str]:
    for path in candidates:
        obj = _get_path(root, path)
        if obj is not None:
            return obj, path
    return None, ""


def detect_family(model: Any) -> str:
    """A layout name from the model's class name (used when the caller does not know the family): the
    layout with the most ``class_markers`` all in it, else the generic multimodal one if the model has
    a vision or audio tower, else ``causal_lm``."""
    name = type(model).__name__
    marked = [(len(lay.class_markers), n) for n in HOOK_LAYOUTS.names()
              if (lay := HOOK_LAYOUTS.get(n)).class_markers and all(m in name for m in lay.class_markers)]  # fmt: skip
    if marked:
        return max(marked)[1]
    generic = HOOK_LAYOUTS.get("generic_multimodal")
    if _first(model, generic.visual)[0] is not None or _first(model, generic.audio)[0] is not None:
        return "generic_multimodal"
    return "causal_lm"


def resolve_modules(model: Any, family: str | None = None) -> ResolvedModules:
    """Find the generation model and its stage modules for ``family`` (detected if None)."""
    fam = family if family in HOOK_LAYOUTS and family != "causal_lm" else detect_family(model)
    layout = HOOK_LAYOUTS.get(fam or "causal_lm")
    gen_model, gen_path = _first(model, layout.generation_model) if layout.generation_model else (None, "")
    gm = gen_model if gen_model is not None else model
    paths: dict[str, str] = {"generation_model": gen_path or "."}
    found: dict[str, Any | None] = {}
    for role in ("visual", "audio", "llm", "lm_head"):
        obj, path = _first(gm, getattr(layout, role))
        found[role] = obj
        if obj is not None:
            paths[role] = path
    if found["lm_head"] is None and hasattr(gm, "get_output_embeddings"):
        found["lm_head"] = gm.get_output_embeddings()
        paths["lm_head"] = "get_output_embeddings()"
    wrapper = None
    llm_path = paths.get("llm", "")
    if "." in llm_path:
        parent_path = llm_path.rsplit(".", 1)[0]
        wrapper = _get_path(gm, parent_path)
        paths["wrapper"] = parent_path
    return ResolvedModules(
        family=layout.family,
        generation_model=gm,
        visual=found["visual"],
        audio=found["audio"],
        wrapper=wrapper,
        llm=found["llm"],
        lm_head=found["lm_head"],
        paths=paths,
        multimodal=layout.multimodal,
    )
