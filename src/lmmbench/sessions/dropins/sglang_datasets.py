"""The requests of a ``bench sglang`` command line whose data set SGLang's own loader draws
(``config.dropins.sglang_serving.drawn_by_sglang``): the tokenizer SGLang would load, the rows its loader draws
(``datasets.sglang.datasets``, ``datasets.sglang.image_datasets``), and those rows as requests."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["draw_rows", "draw_sglang_requests"]

_NO_TOKENIZER = ("agentic-trace",)  # loaders that never call the tokenizer


def _tokenizer(ns: argparse.Namespace, name: str | None, what: str) -> Any:
    """A local tokenizer folder or file, a hub id read from the Hugging Face cache, or a built-in model's name
    (built on first use)."""
    from lmmbench.core.hub import looks_like_hub_id, resolve_hub_snapshot
    from lmmbench.datasets.sglang.rows import SglTokenizer

    if not name:
        raise UserError(f"--dataset-name {ns.dataset_name}: SGLang's loader needs the model's tokenizer: give "
                        "--tokenizer (a tokenizer folder or hub id) or --model")  # fmt: skip
    from lmmbench.models.tiny import TINY_MODEL_NAMES, build_tiny_model

    path = Path(name)
    if not path.exists() and name in TINY_MODEL_NAMES:  # a built-in model's tokenizer, as perf takes it
        path = build_tiny_model(name)
    elif not path.exists() and looks_like_hub_id(name):
        path = Path(resolve_hub_snapshot(name, what, ["tokenizer*", "*.json", "*.txt", "*.jinja", "*.model"]).path)
    if not path.exists():
        raise UserError(f"{what} {name}: no such tokenizer folder, hub id in the local cache or built-in model "
                        f"({', '.join(TINY_MODEL_NAMES)})")  # fmt: skip
    return SglTokenizer(path)


def _sharegpt_path(ns: argparse.Namespace, sharegpt_file: Callable[[], Path]) -> Path:
    if ns.dataset_path:
        path = Path(ns.dataset_path)
        if ns.dataset_name in ("sharegpt", "custom") and not path.is_file():
            raise UserError(f"--dataset-path {path}: file not found")
        if path.is_file():
            return path
    if ns.dataset_name == "custom":
        raise UserError("--dataset-name custom needs --dataset-path: a JSONL file of conversations")
    return sharegpt_file()


def draw_rows(ns: argparse.Namespace, tok: Any, sharegpt_file: Callable[[], Path]) -> list[Any]:
    """The rows SGLang's loader of ``--dataset-name`` draws (``tok``: an ``SglTokenizer``, None for loaders that
    never call it)."""
    from lmmbench.datasets.sglang import datasets as sd
    from lmmbench.datasets.sglang import image_datasets as si
    from lmmbench.datasets.sglang.rows import VllmRng

    rngs, name = VllmRng(ns.seed), ns.dataset_name
    if name in ("sharegpt", "custom"):
        return sd.sharegpt_rows(ns, tok, rngs, _sharegpt_path(ns, sharegpt_file))
    if name.startswith("random"):
        return sd.random_ids(ns, tok, rngs, _sharegpt_path(ns, sharegpt_file) if name == "random" else None)
    if name == "generated-shared-prefix":
        return sd.generated_shared_prefix(ns, tok, rngs)
    if name == "openai":
        return sd.openai_rows(ns, tok, sd.file_arg(ns.dataset_path))
    if name == "longbench_v2":
        return sd.longbench_v2(ns, tok, rngs)
    if name == "speed-bench":
        return sd.speed_bench(ns, tok, rngs)
    if name == "agentic-trace":
        return sd.agentic_trace(ns)
    if name == "mooncake":
        return sd.mooncake(ns, tok)
    if name == "image":
        return si.image_rows(ns, tok)
    return si.mmmu_rows(ns, tok, rngs)


def draw_sglang_requests(ns: argparse.Namespace, options: dict[str, Any],
                         sharegpt_file: Callable[[], Path]) -> tuple[Any, list[Any]]:  # fmt: skip
    """The perf config and the requests SGLang's loader draws for ``ns`` (``options``: its translation;
    ``sharegpt_file``: SGLang's ShareGPT file from the hub, for sharegpt and random without --dataset-path)."""
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.datasets.sglang.requests import build_sglang_requests

    name = ns.dataset_name
    tok = None
    if name in ("image", "mmmu") and ns.model and Path(ns.model).is_dir():  # SGLang: the model's processor
        tok = _tokenizer(ns, ns.model, "--model")
    elif name not in _NO_TOKENIZER:
        tok = _tokenizer(ns, ns.tokenizer or ns.model, "--tokenizer" if ns.tokenizer else "--model")
    rows = draw_rows(ns, tok, sharegpt_file)
    if not rows:
        raise UserError(f"--dataset-name {name}: no request was drawn (SGLang's loader kept no row)")
    own = any(r.extra_body for r in rows)  # rows with their own fields: those win over --extra-request-body
    cfg = PerfConfig.model_validate({**options, "plots": False, "num_requests": max(len(rows), 1)})
    extra = dict(cfg.extra_body) if own else {}
    requests = build_sglang_requests(cfg, rows, extra)
    cfg = cfg.model_copy(update={"num_requests": len(requests), **({"extra_body": {}} if own else {})})
    return cfg, requests
