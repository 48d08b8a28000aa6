"""The name a transformers model gives its KV cache: ``cache`` since transformers 5.2x (``past_key_values`` is
deprecated there and goes in 5.40), ``past_key_values`` before. Read from the model, never from a version."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["cache_kwarg", "returned_cache"]


_KWARG: dict[type, str] = {}


def cache_kwarg(model: Any) -> str:
    """The keyword of ``model.forward`` (and ``generate``) that takes a KV cache in (read once per class)."""
    kind = type(model)
    if kind not in _KWARG:
        _KWARG[kind] = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return _KWARG[kind]


def returned_cache(output: Any) -> Any | None:
    """The KV cache a forward returned (None when it returned none)."""
    if output is None:
        return None
    for name in ("cache", "past_key_values"):
        value = output.get(name) if hasattr(output, "get") else getattr(output, name, None)
        if value is not None:
            return value
    return None
