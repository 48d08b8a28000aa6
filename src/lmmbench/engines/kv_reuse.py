"""Reuse a conversation's KV cache across turns: prefill the shared prefix once, then feed only the
new turn's tokens.

A later turn's prompt (history + new user message) starts with the previous turn's prompt and
its reply, token for token; ``common_prefix_len`` finds how many tokens are shared. ``prefill_prefix``
runs the model once over that prefix (media included: it lies in turn 1) and keeps the
``DynamicCache`` and, for Qwen2-VL / 2.5-VL / 2.5-Omni, the *rope deltas*: with multimodal rope
(mrope) a text token's position is ``index + rope_delta``, where the delta comes from the media
grid of turn 1. ``generate`` on the new tokens reads the deltas from ``model.model.rope_deltas``,
which any other prompt run on the same model overwrites, so ``reuse_generate_kwargs`` puts the
prefix's own deltas back before each reuse (without them the logits differ, see the tests).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from lmmbench.engines.cache_names import cache_kwarg, returned_cache

__all__ = [
    "PrefixCache",
    "common_prefix_len",
    "prefill_prefix",
    "reuse_generate_kwargs",
    "reuse_inputs",
    "rope_delta_owner",
    "set_rope_deltas",
    "verify_reuse",
]


@dataclass
class PrefixCache:
    """The KV cache of the first ``length`` tokens of a conversation, and its rope deltas (or None)."""

    cache: Any
    length: int
    rope_deltas: Any | None


def common_prefix_len(a: Any, b: Any) -> int:
    """Number of leading tokens two 1-D id sequences (tensors or lists) share."""
    la, lb = list(map(int, a)), list(map(int, b))
    n = 0
    for x, y in zip(la, lb, strict=False):
        if x != y:
            break
        n += 1
    return n


def rope_delta_owner(model: Any) -> Any | None:
    """The module holding ``rope_deltas`` (``model.model`` in transformers 5.x, else ``model``), or None."""
    for owner in (getattr(model, "model", None), model):
        if owner is not None and hasattr(owner, "rope_deltas"):
            return owner
    return None


def set_rope_deltas(model: Any, deltas: Any | None) -> None:
    """Put ``deltas`` where ``generate`` reads them (no-op for models without mrope)."""
    owner = rope_delta_owner(model)
    if owner is not None:
        owner.rope_deltas = deltas


def _token_aligned(inputs: dict[str, Any]) -> list[str]:
    """Keys of the per-token tensors (ids, masks, Qwen2.5-VL's ``mm_token_type_ids``): shape (batch, seq)."""
    ids = inputs["input_ids"]
    return [k for k, v in inputs.items()
            if getattr(v, "ndim", 0) == 2 and tuple(v.shape) == tuple(ids.shape)]


def _slice_inputs(inputs: dict[str, Any], length: int) -> dict[str, Any]:
    out = dict(inputs)
    for key in _token_aligned(inputs):
        out[key] = inputs[key][:, :length]
    return out


def prefill_prefix(model: Any, inputs: dict[str, Any], length: int) -> PrefixCache:
    """Run the model over the first ``length`` tokens of ``inputs`` (on the model's device, media
    included) and keep the cache and rope deltas. ``inputs`` must be batch-size 1."""
    import torch

    if int(inputs["input_ids"].shape[0]) != 1:
        raise ValueError("prefill_prefix works on one conversation (batch size 1)")
    set_rope_deltas(model, None)  # recompute the deltas for this prompt
    with torch.no_grad():
        out = model(**_slice_inputs(inputs, length), use_cache=True)
    owner = rope_delta_owner(model)
    deltas = owner.rope_deltas if owner is not None else None
    deltas = deltas.clone() if deltas is not None and hasattr(deltas, "clone") else deltas
    return PrefixCache(cache=returned_cache(out), length=length, rope_deltas=deltas)


def reuse_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """What ``generate`` needs on a reuse turn: the full per-token tensors (ids, mask, token types; the
    cached part is skipped by generate); the media tensors are not needed, their tokens are cached."""
    return {k: inputs[k] for k in _token_aligned(inputs)}


def reuse_generate_kwargs(model: Any, prefix: PrefixCache) -> dict[str, Any]:
    """A fresh copy of the prefix cache for one generate call, with the prefix's rope deltas restored.

    Call it right before ``generate`` (outside the timed region: the copy is bookkeeping, a server
    would hand its cache over)."""
    set_rope_deltas(model, prefix.rope_deltas)
    return {cache_kwarg(model): copy.deepcopy(prefix.cache)}


def verify_reuse(model: Any, inputs: dict[str, Any], prefix: PrefixCache, device: Any) -> dict[str, float]:
    """Next-token logits of the full recompute vs the reuse path (same prompt): max |diff| and
    whether the greedy first token agrees."""
    import torch

    def to_dev(d: dict[str, Any]) -> dict[str, Any]:
        return {k: (v.to(device) if hasattr(v, "to") else v) for k, v in d.items()}

    gen = {"max_new_tokens": 1, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
    with torch.no_grad():
        set_rope_deltas(model, None)
        ref = model.generate(**to_dev(inputs), **gen)
        kwargs = reuse_generate_kwargs(model, prefix)
        reuse = model.generate(**to_dev(reuse_inputs(inputs)), **kwargs, **gen)
    a, b = ref.logits[0].float(), reuse.logits[0].float()
    return {
        "max_abs_logit_diff": float((a - b).abs().max()),
        "same_first_token": float(int(ref.sequences[0, -1]) == int(reuse.sequences[0, -1])),
        "first_token_id": float(int(ref.sequences[0, -1])),
    }
