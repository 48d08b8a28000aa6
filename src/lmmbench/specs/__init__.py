"""Named experiments: the spec registry, the runner, and the built-in specs.

Built-in spec modules are listed in ``BUILTIN_SPEC_MODULES`` and registered on import of this
package (they import nothing heavy at module level); third-party specs come from the
``lmmbench.specs`` entry-point group.
"""

import importlib
import importlib.util

from lmmbench.specs.base import SPECS, Case, RunOptions, Spec, SpecContext, register_spec
from lmmbench.specs.runner import BASE_COLUMNS, RunStats, UnifiedRunner

BUILTIN_SPEC_MODULES = [
    "lmmbench.specs.ttft_breakdown",
    "lmmbench.specs.token_scaling",
    "lmmbench.specs.audio_padding",
    "lmmbench.specs.multiturn_kv_reuse",
    "lmmbench.specs.oom_boundary",
    "lmmbench.specs.ttft_batch",
    "lmmbench.specs.backend_comparison",
    "lmmbench.specs.episodic_eval",
    "lmmbench.specs.model_bench",
]

for _module in BUILTIN_SPEC_MODULES:
    if importlib.util.find_spec(_module) is not None:  # specs land one by one
        importlib.import_module(_module)

__all__ = [
    "BASE_COLUMNS",
    "BUILTIN_SPEC_MODULES",
    "SPECS",
    "Case",
    "RunOptions",
    "RunStats",
    "Spec",
    "SpecContext",
    "UnifiedRunner",
    "register_spec",
]
