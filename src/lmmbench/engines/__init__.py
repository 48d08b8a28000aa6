"""In-process engines: the continuous-batching loop (scheduler / engine / sampler) and its types.

Importing this package does not import torch; the engine loads it when a model is loaded.
"""

from lmmbench.engines.batch_engine import BatchEngine, ContextLengthError, EventCallback
from lmmbench.engines.engine_registry import ENGINES, EngineFactory
from lmmbench.engines.inputs import InputError, InputPreparer
from lmmbench.engines.requests import (
    GenerationEvent,
    GenerationOutput,
    GenerationRequest,
    PreparedInput,
    RequestMetrics,
    RequestState,
    SamplingParams,
)
from lmmbench.engines.sampler import Sampler, TorchSampler
from lmmbench.engines.scheduler import FcfsScheduler, QueueFullError, Scheduler
from lmmbench.engines.transformers_engine import Engine, TransformersEngine

__all__ = [
    "ENGINES",
    "BatchEngine",
    "ContextLengthError",
    "Engine",
    "EngineFactory",
    "EventCallback",
    "FcfsScheduler",
    "GenerationEvent",
    "GenerationOutput",
    "GenerationRequest",
    "InputError",
    "InputPreparer",
    "PreparedInput",
    "QueueFullError",
    "RequestMetrics",
    "RequestState",
    "Sampler",
    "SamplingParams",
    "Scheduler",
    "TorchSampler",
    "TransformersEngine",
]
