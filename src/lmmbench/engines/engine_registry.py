"""The registry of engines: how a model name becomes an ``Engine`` (hardware backends, as ByteMLPerf's).

``transformers`` is built in. A hardware vendor adds its own engine with
``@ENGINES.register("my-npu")`` or through the ``lmmbench.engines`` entry-point group; the factory
takes ``(model, device, dtype)`` and returns an object with the ``Engine`` methods. The scheduler
and sampler are passed to ``BatchEngine`` directly.
"""

from __future__ import annotations

from collections.abc import Callable

from lmmbench.core.registry import Registry
from lmmbench.engines.transformers_engine import Engine, TransformersEngine

__all__ = ["ENGINES", "EngineFactory"]

EngineFactory = Callable[[str, str, str], Engine]

ENGINES: Registry[EngineFactory] = Registry("engines")


@ENGINES.register("transformers")
def transformers_engine(model: str, device: str = "cpu", dtype: str = "float32") -> Engine:
    """A ``TransformersEngine`` over a built-in tiny model or a local model directory."""
    from lmmbench.models import load_model

    return TransformersEngine(load_model(model, device=device, dtype=dtype))
