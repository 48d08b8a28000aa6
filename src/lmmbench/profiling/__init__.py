"""Stage timers (CUDA events / perf_counter_ns), module hooks per model family, stage breakdown."""

from lmmbench.profiling.families import HOOK_LAYOUTS, ModuleLayout, ResolvedModules, resolve_modules
from lmmbench.profiling.hooks import StageHooks
from lmmbench.profiling.stages import OTHERS_PARTS, PREFILL_PARTS, STAGE_FIELDS, stage_breakdown
from lmmbench.profiling.timeline import CPU_TIMER, CUDA_TIMER, ResolvedSpan, Timeline

__all__ = [
    "CPU_TIMER",
    "CUDA_TIMER",
    "HOOK_LAYOUTS",
    "OTHERS_PARTS",
    "PREFILL_PARTS",
    "STAGE_FIELDS",
    "ModuleLayout",
    "ResolvedModules",
    "ResolvedSpan",
    "StageHooks",
    "Timeline",
    "resolve_modules",
    "stage_breakdown",
]
