"""One deterministic processor per model family, checked by a probe right after it is built.

What ``AutoProcessor`` returns depends on what is installed: with torchvision present it returns,
for a directory that does not declare its processor, a *tokenizer*, which takes ``videos=`` /
``audio=`` and silently ignores them. So a family's processor is assembled from its parts
(PIL image processor, NumPy video processor, Whisper feature extractor) on every machine; the
stock ``AutoProcessor`` is used only when the directory declares its processor
(``processor_config.json``, or ``processor_class`` in its preprocessor / tokenizer config) and
its result passes the same probe. The probe: a processor (not a tokenizer) whose one-frame
video and small image expand into visual tokens (more than the lone placeholder), and, for
audio families, whose one-second tone yields audio tokens and mel frames. A processor that
fails the probe is refused with the medium and the class named.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry
from lmmbench.models.families import ModelFamily
from lmmbench.models.media_check import media_shortfall, media_token_counts

__all__ = [
    "PARTS_BUILDERS",
    "PROCESSOR_PARTS",
    "PartsBuilder",
    "ProcessorBuild",
    "ProcessorCheckError",
    "build_family_processor",
    "declares_processor",
    "probe_processor",
]

log = logging.getLogger(__name__)

STOCK = "stock_auto_processor"
PARTS = "assembled_from_parts"


class ProcessorCheckError(UserError):
    """A processor failed the probe (no media tokens for some medium); the message names both."""


@dataclass
class ProcessorBuild:
    """The processor used, how it was obtained, its classes and the probe's token counts."""

    processor: Any
    path: str  # STOCK | PARTS | "none" (text model)
    classes: dict[str, str] = field(default_factory=dict)
    probe: dict[str, int] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)  # why a stock processor was not used

    def record(self) -> dict[str, Any]:
        """The ``run.json`` form."""
        return {"path": self.path, "classes": self.classes, "probe": self.probe, "rejected": self.rejected}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def declares_processor(path: Path) -> bool:
    """Whether the model directory names its processor (the only case the stock one is tried)."""
    if (path / "processor_config.json").is_file():
        return True
    return any("processor_class" in _read_json(path / name)
               for name in ("preprocessor_config.json", "tokenizer_config.json"))


def _video_processor(path: Path) -> Any:
    from lmmbench.models.video_processor import NumpyQwenVideoProcessor

    vcfg = _read_json(path / "video_preprocessor_config.json") or _read_json(path / "preprocessor_config.json")
    size = vcfg.get("size") or {}
    return NumpyQwenVideoProcessor(
        patch_size=int(vcfg.get("patch_size", 14)),
        temporal_patch_size=int(vcfg.get("temporal_patch_size", 2)),
        merge_size=int(vcfg.get("merge_size", 2)),
        min_pixels=int(vcfg.get("min_pixels", size.get("shortest_edge", 128 * 28 * 28))),
        max_pixels=int(vcfg.get("max_pixels", size.get("longest_edge", 768 * 28 * 28))),
        fps=float(vcfg.get("fps", 2.0)),
    )


def _image_processor(path: Path) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil.from_pretrained(str(path))


def _without_video_class_check(proc_cls: Any) -> Any:
    """A subclass that accepts our NumPy video processor (the stock check wants a torchvision class)."""

    def check_argument_for_proper_class(self: Any, argument_name: str, argument: Any) -> Any:
        if argument_name == "video_processor":
            return type(argument)
        return proc_cls.check_argument_for_proper_class(self, argument_name, argument)

    return type(proc_cls.__name__, (proc_cls,), {"check_argument_for_proper_class": check_argument_for_proper_class})


def _qwen_vl_parts(family: ModelFamily, path: Path, tokenizer: Any) -> Any:
    import transformers

    proc_cls = _without_video_class_check(getattr(transformers, family.processor_class))
    return proc_cls(image_processor=_image_processor(path), video_processor=_video_processor(path),
                    tokenizer=tokenizer, chat_template=getattr(tokenizer, "chat_template", None))


def _qwen_omni_parts(family: ModelFamily, path: Path, tokenizer: Any) -> Any:
    import transformers
    from transformers import WhisperFeatureExtractor

    fcfg = _read_json(path / "feature_extractor_config.json") or _read_json(path / "preprocessor_config.json")
    keys = ("feature_size", "sampling_rate", "hop_length", "chunk_length", "n_fft", "padding_value")
    feature_extractor = WhisperFeatureExtractor(**{k: fcfg[k] for k in keys if k in fcfg})
    proc_cls = _without_video_class_check(getattr(transformers, family.processor_class))
    return proc_cls(image_processor=_image_processor(path), video_processor=_video_processor(path),
                    feature_extractor=feature_extractor, tokenizer=tokenizer,
                    chat_template=getattr(tokenizer, "chat_template", None))


#: builder(family, model dir, tokenizer) -> processor, assembled from the parts a model directory holds
PartsBuilder = Callable[[ModelFamily, Path, Any], Any]

#: ``ModelFamily.parts`` -> its processor builder; plugins add builders through ``lmmbench.processor_parts``.
PROCESSOR_PARTS: Registry[PartsBuilder] = Registry("processor_parts")
PROCESSOR_PARTS.add("qwen_vl", _qwen_vl_parts)
PROCESSOR_PARTS.add("qwen_omni", _qwen_omni_parts)
#: The registry's live mapping (tests swap a builder in with ``monkeypatch.setitem``).
PARTS_BUILDERS: dict[str, PartsBuilder] = PROCESSOR_PARTS.entries


def _classes(processor: Any) -> dict[str, str]:
    out = {"processor": type(processor).__name__}
    for part in ("image_processor", "video_processor", "feature_extractor", "tokenizer"):
        obj = getattr(processor, part, None)
        if obj is not None:
            out[part] = type(getattr(obj, "__wrapped__", obj)).__name__
    return out


def _probe_media(sampling_rate: int) -> tuple[Any, Any, Any]:
    """A one-frame video, a small image and a one-second tone (deterministic)."""
    import numpy as np
    from PIL import Image

    grad = np.linspace(0, 255, 56 * 56 * 3, dtype=np.float32).reshape(56, 56, 3).astype(np.uint8)
    t = np.arange(sampling_rate, dtype=np.float32) / sampling_rate
    tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    return grad[None], Image.fromarray(grad), tone


def probe_processor(processor: Any, tokenizer: Any, family: ModelFamily) -> dict[str, int]:
    """Token counts of a probe through ``processor``; ``ProcessorCheckError`` names the medium and the
    class when one does not reach the model's input."""
    from transformers.processing_utils import ProcessorMixin

    cls = type(processor).__name__
    if not isinstance(processor, ProcessorMixin):
        raise ProcessorCheckError(f"{family.name}: the processor is a {cls}, not a multimodal processor: "
                                  "images, video and audio would be silently ignored")
    fe = getattr(processor, "feature_extractor", None)
    if family.audio and fe is None:
        raise ProcessorCheckError(f"audio: processor {cls} has no feature extractor, audio would be ignored")
    rate = int(getattr(fe, "sampling_rate", 16000))
    video, image, tone = _probe_media(rate)
    content: list[dict[str, Any]] = [{"type": "video"}, {"type": "image"}]
    call: dict[str, Any] = {"videos": [video], "videos_kwargs": {"fps": 2.0}, "images": [image]}
    if family.audio:
        content.append({"type": "audio"})
        call.update(audio=[tone], audio_kwargs={"sampling_rate": rate})
    content.append({"type": "text", "text": "probe"})
    try:
        text = processor.apply_chat_template([{"role": "user", "content": content}],
                                             add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text if isinstance(text, str) else str(text[0])], return_tensors="pt", **call)
    except Exception as exc:
        raise ProcessorCheckError(f"{family.name}: processor {cls} failed on the probe media "
                                  f"({type(exc).__name__}: {str(exc)[:200]})") from None
    counts = media_token_counts(inputs, tokenizer, processor)
    expected = {"video": True, "image": True, "audio": family.audio}

    reason = media_shortfall(counts, expected, cls)
    if reason:
        raise ProcessorCheckError(f"{family.name}: {reason}")
    return counts


def _try_stock(family: ModelFamily, path: Path, tokenizer: Any, rejected: list[str]) -> ProcessorBuild | None:
    try:
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(str(path))
        probe = probe_processor(processor, tokenizer, family)
    except Exception as exc:  # any refusal: record why, assemble the parts instead
        rejected.append(f"AutoProcessor: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
        log.info("stock processor of %s not used: %s", path, rejected[-1])
        return None
    return ProcessorBuild(processor, STOCK, _classes(processor), probe, rejected)


def build_family_processor(family: ModelFamily, path: Path, tokenizer: Any) -> ProcessorBuild:
    """The checked processor of ``family`` for the model directory ``path`` (``path='none'`` for text models)."""
    if not family.multimodal:
        return ProcessorBuild(None, "none")
    rejected: list[str] = []
    if declares_processor(path):
        stock = _try_stock(family, path, tokenizer, rejected)
        if stock is not None:
            return stock
    if family.parts not in PROCESSOR_PARTS:
        raise UserError(f"{family.name}: no processor builder '{family.parts}' (known: "
                        f"{', '.join(PROCESSOR_PARTS.names())})")  # fmt: skip
    builder = PROCESSOR_PARTS.get(family.parts)
    processor = builder(family, path, tokenizer)
    probe = probe_processor(processor, tokenizer, family)
    return ProcessorBuild(processor, PARTS, _classes(processor), probe, rejected)
