"""Shape-only models: the published architectures (config.json numbers) with random weights.

Timing and memory do not depend on the values of the weights, so a shape answers latency and
memory questions without downloading a checkpoint. The configs are data shipped in
``models/shape_configs/<name>.json``, each naming the model card it comes from. ``shape:NAME``
is built on first use: the weights are created directly on the target device in the target dtype,
saved once under ``$LMMBENCH_HOME/models/shape-<name>``, with the built-in tokenizer padded so that
its special-token ids are the config's. A build that would not fit the device is refused up front
with its size estimate. ``num_layers`` cuts every tower (LLM, vision, audio) to N layers, for quick
CPU checks; the embedding and vocabulary keep their real size.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.models.families import MODEL_FAMILIES, ModelFamily, family_of_model_type
from lmmbench.models.tiny import MARKER, SEED, lmmbench_home

__all__ = [
    "SHAPE_PREFIX",
    "ShapeSpec",
    "available_bytes",
    "build_shape_model",
    "check_fits",
    "count_parameters",
    "is_shape_name",
    "load_shape_spec",
    "random_weights_info",
    "refuse_random_weights",
    "shape_config",
    "shape_model_dir",
    "shape_names",
    "weights_provenance",
]

SHAPE_PREFIX = "shape:"
SHAPE_BUILD_VERSION = 1
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_FIT_SHARE = 0.9  # refuse a build whose weights take more than this share of the free memory
_OMNI_NAMED = {"image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>", "audio_token": "<|AUDIO|>",
               "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
               "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"}
_VL_NAMED = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"}


@dataclass(frozen=True)
class ShapeSpec:
    """One shipped shape: its published config and where the numbers come from."""

    name: str
    source: str
    description: str
    config: dict[str, Any]
    special_tokens: dict[int, str]
    chat_tokens: str
    eos_token: str
    pad_token: str
    published_params_b: float | None
    published_params_note: str
    reference_parts: dict[str, Any]

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    @property
    def family(self) -> str:
        """The registered model family of this shape's ``model_type`` (any other is a causal LM)."""
        found = family_of_model_type(self.model_type)
        return found.name if found is not None else "causal_lm"

    @property
    def family_record(self) -> ModelFamily:
        """The ``ModelFamily`` of this shape: its model class and media say how to build it."""
        return MODEL_FAMILIES.get(self.family)


def _data_dir() -> Any:
    return resources.files("lmmbench.models").joinpath("shape_configs")


def shape_names() -> list[str]:
    """Names of the shipped shapes, sorted."""
    return sorted(p.name.removesuffix(".json") for p in _data_dir().iterdir() if p.name.endswith(".json"))


def is_shape_name(model: str) -> bool:
    """True for ``shape:NAME``."""
    return model.startswith(SHAPE_PREFIX)


def load_shape_spec(name: str) -> ShapeSpec:
    """The shipped shape ``name`` (with or without the ``shape:`` prefix); UserError if unknown."""
    name = name.removeprefix(SHAPE_PREFIX)
    if name in ("pi0", "pi0-small", "pi0-tiny"):  # models.vla.VLA_SHAPES (importing it would pull torch here)
        raise UserError(f"shape:{name} is a vision-language-action policy, not a language model: use it with "
                        f"lmmbench run episodic-eval --env pusht --policy {name}")
    if name not in shape_names():
        raise UserError(f"unknown shape '{name}'; shapes: {', '.join(shape_names())} (lmmbench models shapes)")
    data = json.loads(_data_dir().joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return ShapeSpec(
        name=data["name"], source=data["source"], description=data["description"], config=data["config"],
        special_tokens={int(k): v for k, v in data["special_tokens"].items()}, chat_tokens=data["chat_tokens"],
        eos_token=data["eos_token"], pad_token=data["pad_token"],
        published_params_b=data.get("published_params_b"),
        published_params_note=data.get("published_params_note", ""),
        reference_parts=data.get("reference_parts", {}),
    )


def _cut_layers(cfg: dict[str, Any], num_layers: int) -> dict[str, Any]:
    """Every tower cut to ``num_layers`` (a vision tower keeps at least one full-attention block)."""
    cfg = copy.deepcopy(cfg)
    text = cfg.get("text_config", cfg)
    text["num_hidden_layers"] = min(num_layers, int(text["num_hidden_layers"]))
    if "max_window_layers" in text:
        text["max_window_layers"] = text["num_hidden_layers"]
    vision = cfg.get("vision_config")
    if vision:
        vision["depth"] = min(num_layers, int(vision["depth"]))
        full = [i for i in vision.get("fullatt_block_indexes", []) if i < vision["depth"]]
        vision["fullatt_block_indexes"] = full or [vision["depth"] - 1]
    audio = cfg.get("audio_config")
    if audio:
        audio["encoder_layers"] = min(num_layers, int(audio["encoder_layers"]))
        audio["num_hidden_layers"] = audio["encoder_layers"]
    return cfg


def shape_config(spec: ShapeSpec, num_layers: int | None = None) -> Any:
    """The transformers config of ``spec`` (every tower cut to ``num_layers`` when given)."""
    from transformers import AutoConfig

    raw = _cut_layers(spec.config, num_layers) if num_layers else copy.deepcopy(spec.config)
    model_type = raw.pop("model_type")
    raw.pop("torch_dtype", None)
    return AutoConfig.for_model(model_type, **raw)


def _model_class(spec: ShapeSpec) -> Any:
    import transformers as tf

    return getattr(tf, spec.family_record.model_class)


def _instantiate(spec: ShapeSpec, cfg: Any, dtype: Any) -> Any:
    import transformers as tf

    cls = _model_class(spec)
    if cls is tf.AutoModelForCausalLM:
        return cls.from_config(cfg, dtype=dtype)
    return cls._from_config(cfg, dtype=dtype)


def count_parameters(spec: ShapeSpec, num_layers: int | None = None) -> int:
    """Parameters of the shape, counted on the meta device (no memory is allocated)."""
    import torch

    with torch.device("meta"):
        model = _instantiate(spec, shape_config(spec, num_layers), torch.float32)
    return int(sum(p.numel() for p in model.parameters()))


def shape_model_dir(name: str, num_layers: int | None = None) -> Path:
    """Where ``shape:NAME`` (or its ``num_layers`` variant) is saved under $LMMBENCH_HOME."""
    name = name.removeprefix(SHAPE_PREFIX)
    suffix = f"-L{num_layers}" if num_layers else ""
    return lmmbench_home() / "models" / f"shape-{name}{suffix}"


def available_bytes(device: Any) -> int:
    """Free memory of ``device``: CUDA's free bytes, or the host's MemAvailable."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    with open("/proc/meminfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


_available_bytes = available_bytes  # the name check_fits calls (tests replace it)


def check_fits(spec: ShapeSpec, n_params: int, dtype_name: str, device: Any, out: Path) -> int:
    """Refuse (UserError) a build whose weights would not fit the device's free memory or the disk."""
    need = n_params * _DTYPE_BYTES[dtype_name]
    gib = 1024**3
    have = _available_bytes(device)
    if need > _FIT_SHARE * have:
        raise UserError(
            f"shape:{spec.name}: {n_params / 1e9:.2f} B parameters in {dtype_name} need about {need / gib:.1f} GiB "
            f"for the weights alone, but {device} has {have / gib:.1f} GiB free; use --dtype bfloat16, a bigger "
            f"device, or a reduced variant (lmmbench models build shape:{spec.name} --num-layers 2)")
    disk = shutil.disk_usage(out.parent if out.parent.exists() else lmmbench_home().parent).free
    if need > disk:
        raise UserError(f"shape:{spec.name}: saving needs about {need / gib:.1f} GiB, but {out.parent} has "
                        f"{disk / gib:.1f} GiB free; set LMMBENCH_HOME to a bigger disk or use --out")
    return need


def random_weights_info(path: Path) -> dict[str, Any] | None:
    """The marker of a shape-only model directory (random weights), or None for any other model."""
    marker = path / MARKER
    if not marker.is_file():
        return None
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) and info.get("kind") == "shape" else None


def _is_built(out: Path) -> bool:
    info = random_weights_info(out)
    return info is not None and info.get("build_version") == SHAPE_BUILD_VERSION


def _resolve_device_dtype(device: str, dtype: str) -> tuple[Any, str]:
    import torch

    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                       "cpu" if device == "auto" else device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available on this machine; use --device cpu or auto")
    if dtype == "auto":
        dtype = "bfloat16" if dev.type == "cuda" else "float32"
    if dtype not in _DTYPE_BYTES:
        raise UserError(f"unknown dtype '{dtype}'; use one of auto, {', '.join(_DTYPE_BYTES)}")
    return dev, dtype


def build_shape_model(name: str, device: str = "auto", dtype: str = "auto", num_layers: int | None = None,
                      out: Path | None = None, force: bool = False) -> Path:
    """Build (once) the shape ``name`` and return its directory, an ordinary Hugging Face model directory."""
    spec = load_shape_spec(name)
    if num_layers is not None and num_layers < 1:
        raise UserError(f"--num-layers {num_layers}: give at least 1")
    out = (out or shape_model_dir(spec.name, num_layers)).expanduser()
    if not force and _is_built(out):
        return out
    import torch

    dev, dtype_name = _resolve_device_dtype(device, dtype)
    n_params = count_parameters(spec, num_layers)
    out.parent.mkdir(parents=True, exist_ok=True)
    check_fits(spec, n_params, dtype_name, dev, out)
    tmp = out.with_name(f".{out.name}.building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _save_tokenizer(spec, tmp)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(SEED)
        with torch.device(dev):
            model = _instantiate(spec, shape_config(spec, num_layers), getattr(torch, dtype_name))
    model.eval()
    model.save_pretrained(str(tmp))
    del model
    _save_processor_parts(spec, tmp)
    gen = {"eos_token_id": spec.config.get("eos_token_id"), "pad_token_id": spec.config.get("pad_token_id"),
           "do_sample": False}
    (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2))
    info = {"kind": "shape", "name": f"shape:{spec.name}", "random_weights": True, "source": spec.source,
            "family": spec.family, "num_layers": num_layers, "parameters": n_params, "dtype": dtype_name,
            "built_on": str(dev), "talker_loaded": False, "seed": SEED, "build_version": SHAPE_BUILD_VERSION}
    (tmp / MARKER).write_text(json.dumps(info, indent=2))
    if out.exists():
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process built it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _save_tokenizer(spec: ShapeSpec, out: Path) -> None:
    from lmmbench.models.shape_tokenizer import build_shape_tokenizer, chat_template_for

    names = set(spec.special_tokens.values())
    named = _OMNI_NAMED if "<|IMAGE|>" in names else _VL_NAMED if spec.family_record.vision else {}
    bos = "<|begin_of_text|>" if spec.chat_tokens == "llama3" else None
    build_shape_tokenizer(out, spec.special_tokens, named, spec.eos_token, spec.pad_token,
                          chat_template_for(spec.chat_tokens, spec.special_tokens), bos=bos)


def _save_processor_parts(spec: ShapeSpec, out: Path) -> None:
    """The published preprocessing settings: image and video patching, and Whisper mel features."""
    if not spec.family_record.multimodal:
        return
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056).save_pretrained(str(out))
    video = {"patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
             "min_pixels": 128 * 28 * 28, "max_pixels": 768 * 28 * 28, "fps": 2.0}
    (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    if spec.family_record.audio:
        from transformers import WhisperFeatureExtractor

        fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, chunk_length=300, hop_length=160)
        fe_dict = fe.to_dict()
        fe_dict.pop("mel_filters", None)
        (out / "feature_extractor_config.json").write_text(json.dumps(fe_dict, indent=2, default=str))


def weights_provenance(model: str) -> dict[str, Any] | None:
    """For a shape-only model (``shape:NAME`` or a directory built from one): its marker; else None."""
    path = shape_model_dir(model) if is_shape_name(model) else Path(model).expanduser()
    info = random_weights_info(path) if path.is_dir() else None
    if info is None and is_shape_name(model):
        info = {"kind": "shape", "name": model, "random_weights": True}
    return info


def refuse_random_weights(model: str | None, allowed: bool) -> dict[str, Any] | None:
    """Accuracy on random weights means nothing: UserError for a shape-only model unless ``allowed``."""
    info = weights_provenance(model) if model else None
    if info is not None and not allowed:
        raise UserError(f"--model {model}: a shape-only model has random weights, so its accuracy means nothing; "
                        "pass --allow-random-weights to run the pipeline anyway (e.g. to time it)")
    return info
