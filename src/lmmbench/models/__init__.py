"""Built-in tiny models and model loading. Importing this package does not import torch."""

from lmmbench.models.loading import (
    LoadedModel,
    ModelRef,
    build_processor,
    family_descriptions,
    load_model,
    resolve_model,
)
from lmmbench.models.tiny import TINY_MODEL_NAMES, build_tiny_model, lmmbench_home, tiny_model_dir

__all__ = [
    "TINY_MODEL_NAMES",
    "LoadedModel",
    "ModelRef",
    "build_processor",
    "build_tiny_model",
    "family_descriptions",
    "lmmbench_home",
    "load_model",
    "resolve_model",
    "tiny_model_dir",
]
