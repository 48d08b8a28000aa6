"""The attention implementation of a loaded model, and the matmul precision settings, for run.json.

Attention memory decides how long an input fits (eager materialises the full attention matrix:
quadratic in tokens; sdpa / flash_attention_2 do not), and TF32 / reduced-precision flags change
both speed and numerics, so a run records them and ``--attn-implementation`` selects the first.
"""

from __future__ import annotations

from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["ATTN_CHOICES", "apply_attention", "attention_record", "precision_settings"]

ATTN_CHOICES = ("auto", "sdpa", "eager", "flash_attention_2")


def _sub_implementations(model: Any) -> dict[str, str]:
    """The implementation each sub-config (text, vision, audio) ended up with."""
    cfg = model.config
    out = {"model": str(getattr(cfg, "_attn_implementation", None))}
    for name in ("text_config", "vision_config", "audio_config"):
        sub = getattr(cfg, name, None)
        if sub is not None:
            out[name.removesuffix("_config")] = str(getattr(sub, "_attn_implementation", None))
    return out


def apply_attention(model: Any, implementation: str) -> dict[str, Any]:
    """Switch ``model`` (every tower) to ``implementation`` unless ``auto``; return what is in use."""
    if implementation not in ATTN_CHOICES:
        raise UserError(f"--attn-implementation {implementation}: use one of {', '.join(ATTN_CHOICES)}")
    if implementation != "auto":
        try:
            model.set_attn_implementation(implementation)
        except (ImportError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"--attn-implementation {implementation}: not usable here ({first})") from None
    return attention_record(model, implementation)


def attention_record(model: Any, requested: str = "auto") -> dict[str, Any]:
    """What run.json says about attention: requested and in use, per tower."""
    return {"requested": requested, "in_use": _sub_implementations(model)}


def precision_settings() -> dict[str, Any]:
    """torch's float32 matmul precision and the TF32 / reduced-precision flags."""
    import torch

    matmul = torch.backends.cuda.matmul
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda_allow_bf16_reduced_precision_reduction": bool(matmul.allow_bf16_reduced_precision_reduction),
        "cuda_allow_fp16_reduced_precision_reduction": bool(matmul.allow_fp16_reduced_precision_reduction),
    }
