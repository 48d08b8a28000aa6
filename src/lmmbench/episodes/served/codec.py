"""openpi's wire format (openpi-client's ``msgpack_numpy``, read, not copied): msgpack with numpy arrays as maps
``{b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str, b"shape": shape}`` and numpy scalars as
``{b"__npgeneric__": True, b"data": item, b"dtype": dtype.str}``; object, void and complex arrays are refused."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["packb", "unpackb"]


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind in ("V", "O", "c"):
        raise ValueError(f"unsupported dtype: {obj.dtype}")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _hook(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def packb(obj: Any) -> bytes:
    """``obj`` (dicts, lists, numbers, strings, numpy arrays and scalars) as openpi's msgpack bytes."""
    import msgpack  # type: ignore[import-untyped]

    return bytes(msgpack.packb(obj, default=_default))


def unpackb(data: bytes) -> Any:
    """openpi's msgpack bytes back to Python and numpy objects (arrays read-only, over the message's bytes)."""
    import msgpack

    return msgpack.unpackb(data, object_hook=_hook)
