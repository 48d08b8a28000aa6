"""Published path of the load-test data-set registry for plugins (docs/extending.md); the module is
``datasets.perf.registry``."""

from lmmbench.datasets.perf.registry import (
    PERF_DATASETS,
    DatasetBuilder,
    count_tokens,
    load_tokenizer,
    output_length,
    request_body,
    synthetic_prompt,
    synthetic_text,
    token_pool,
)

__all__ = [
    "PERF_DATASETS", "DatasetBuilder", "count_tokens", "load_tokenizer", "output_length",
    "request_body", "synthetic_prompt", "synthetic_text", "token_pool",
]  # fmt: skip
