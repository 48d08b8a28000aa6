"""Every built-in perf data set, registered: what ``perf --dataset`` is checked against and built from.

``perf_datasets`` holds the registry and the plain data sets; ``perf_structured_datasets`` (multi-turn,
shared-prefix, trace replay) and ``vllm_hub_datasets`` (vLLM's burstgpt, spec_bench, hf) register
into it. Importing this module registers them all, so a config field names this module's
``PERF_DATASETS`` (``config.registry_field.registered_in``) and ``build_requests`` lives here rather
than in ``perf_datasets`` (which the registering modules import: no import circle).
"""

from __future__ import annotations

import random
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.datasets.perf import structured as perf_structured_datasets
from lmmbench.datasets.perf.registry import PERF_DATASETS
from lmmbench.datasets.vllm import hub_datasets as vllm_hub_datasets

__all__ = ["PERF_DATASETS", "build_requests"]

_REGISTERING = (perf_structured_datasets, vllm_hub_datasets)  # imported for their registrations


def build_requests(cfg: PerfConfig, n: int, tok: Any | None = None) -> list[PerfRequest]:
    """``n`` requests from the configured dataset (file datasets are shuffled by seed and cycled)."""
    hub = cfg.dataset == "hf"  # --dataset-path: a hub id or a data set folder
    if cfg.dataset_path is not None and cfg.dataset != "synthetic" and not hub and not cfg.dataset_path.is_file():
        raise UserError(f"--dataset-path {cfg.dataset_path}: file not found")
    return PERF_DATASETS.get(cfg.dataset)(cfg, n, tok, random.Random(cfg.seed))
