"""``vllm bench serve``'s command line, parsed as vLLM parses it and translated into lmmbench's perf config.

The parser is built from vLLM 0.33.0's own flag list (``vllm_bench_serve_flags.json``, read from its source by
``benchmarks/extract_vllm_bench_flags.py``): the same names, defaults, types, choices and ``nargs`` (space-
separated lists), with argparse's prefix abbreviations and ``--flag=value``. Every flag given a value other than
vLLM's default either acts (``translate``) or is refused with one line saying why: because it acts only inside
vLLM's own process, or because this drop-in does not carry it yet (listed in docs/perf.md, "Coming from vLLM").
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["VLLM_FLAGS", "VLLM_VERSION", "build_parser", "refusal", "translate"]

VLLM_VERSION = "0.33.0"
VLLM_FLAGS: list[dict[str, Any]] = json.loads(
    resources.files("lmmbench.config").joinpath("vllm_bench_serve_flags.json").read_text(encoding="utf-8"))["flags"]

_BACKENDS = {"openai": "completions", "vllm": "completions", "openai-chat": "chat"}
_DATASETS = {"random": "synthetic", "sharegpt": "sharegpt", "custom": "jsonl", "prefix_repetition": "shared_prefix",
             "burstgpt": "burstgpt", "spec_bench": "spec_bench", "hf": "hf"}  # these 3: datasets.vllm_hub_datasets
_ENDPOINTS = {"/v1/completions": "completions", "/completions": "completions", "/v1/chat/completions": "chat",
              "/chat/completions": "chat"}  # fmt: skip
_PENALTIES = ("frequency_penalty", "presence_penalty", "repetition_penalty")
#: flags whose effect lives inside vLLM's own client process, and why lmmbench refuses them
IN_VLLM_ONLY = {
    "trust_remote_code": "it runs a tokenizer repository's Python inside vLLM; lmmbench's tokenizers library runs "
                         "no repository code",
    "tokenizer_mode": "vLLM's tokenizer implementations (mistral, slow) are vLLM's own",
    "skip_tokenizer_init": "vLLM's client-side tokenizer switch; lmmbench counts tokens from the server's usage",
    "self_timed": "vLLM's in-process timing mode",
    "plot_timeline": "vLLM's own plot; lmmbench writes its plots and report.html in the run folder",
    "plot_dataset_stats": "vLLM's own plot; lmmbench writes its plots and report.html in the run folder",
}  # fmt: skip
#: flags (destinations) this drop-in carries to lmmbench's engine
_CARRIED = {
    "backend", "base_url", "host", "port", "endpoint", "model", "served_model_name", "tokenizer", "dataset_name",
    "dataset_path", "num_prompts", "random_input_len", "random_output_len", "random_range_ratio", "input_len",
    "output_len", "request_rate", "burstiness", "max_concurrency", "seed", "ignore_eos", "num_warmups",
    "save_result", "save_detailed", "append_result", "result_dir", "result_filename", "label", "metadata",
    "percentile_metrics", "metric_percentiles", "goodput", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "extra_body", "disable_tqdm",
    "ready_check_timeout_sec", "profile", "random_prefix_len",
}  # fmt: skip


def _type(name: str | None) -> Any:
    return {"int": int, "float": float, "str": str, "loads": json.loads}.get(name or "", None if name is None else str)


def build_parser() -> argparse.ArgumentParser:
    """``vllm bench serve``'s parser, from vLLM's flag list."""
    parser = argparse.ArgumentParser(prog="lmmbench bench serve", allow_abbrev=True,
                                     description=f"A drop-in for `vllm bench serve` (vLLM {VLLM_VERSION}'s flags).")
    for f in VLLM_FLAGS:
        kwargs: dict[str, Any] = {"dest": f["dest"], "default": f["default"], "help": f["help"] or None}
        if f["action"] == "_StoreTrueAction":
            kwargs["action"] = "store_true"
        elif f["action"] == "BooleanOptionalAction":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            if f["type"] is not None:
                kwargs["type"] = _type(f["type"])
            if f["nargs"] is not None:
                kwargs["nargs"] = f["nargs"]
            if f["choices"]:
                kwargs["choices"] = f["choices"]
        flags = [o for o in f["flags"] if not o.startswith("--no-") or f["action"] != "BooleanOptionalAction"]
        parser.add_argument(*flags, **kwargs)
    return parser


def refusal(dest: str) -> str:
    """Why flag ``dest`` is refused (only for flags not carried)."""
    flag = next(f["flags"][0] for f in VLLM_FLAGS if f["dest"] == dest)
    if dest in IN_VLLM_ONLY:
        return f"{flag}: refused: {IN_VLLM_ONLY[dest]}"
    return f"{flag}: not supported by lmmbench bench serve yet (docs/perf.md, 'Coming from vLLM'); drop it"


def _changed(ns: argparse.Namespace) -> list[str]:
    return [f["dest"] for f in VLLM_FLAGS if getattr(ns, f["dest"]) != f["default"]]


def _pairs(items: list[str] | None, sep: str, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, found, value = item.partition(sep)
        if not found:
            raise UserError(f"{flag} {item!r}: expected KEY{sep}VALUE")
        out[key.strip()] = value.strip()
    return out


def _range_ratio(text: str) -> float:
    """vLLM's --random-range-ratio: a float, or {"input": r, "output": r} (lmmbench takes one ratio for both)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        both = json.loads(text)
        ratios = {float(both["input"]), float(both["output"])}
    except (ValueError, TypeError, KeyError):
        raise UserError(f"--random-range-ratio {text!r}: a number, or a JSON dict with input and output") from None
    if len(ratios) != 1:
        raise UserError(f"--random-range-ratio {text}: different input and output ratios are not supported by "
                        "lmmbench bench serve yet; give one ratio")
    return ratios.pop()


def translate(ns: argparse.Namespace) -> dict[str, Any]:
    """The perf options of a parsed ``vllm bench serve`` command line (vLLM's defaults included)."""
    for dest in _changed(ns):
        if dest not in _CARRIED:
            raise UserError(refusal(dest))
    if ns.backend not in _BACKENDS:
        raise UserError(f"--backend {ns.backend}: lmmbench measures generation (completions, chat); embeddings, "
                        "rerank, pooling and audio backends are not supported")
    if ns.dataset_name not in _DATASETS:
        raise UserError(f"--dataset-name {ns.dataset_name}: not supported by lmmbench bench serve yet; "
                        f"supported: {', '.join(_DATASETS)}")
    endpoint = _ENDPOINTS.get(ns.endpoint)
    if endpoint is None:
        raise UserError(f"--endpoint {ns.endpoint}: expected one of {', '.join(_ENDPOINTS)}")
    goodput = _pairs(ns.goodput, ":", "--goodput")
    slo = {f"{k}_ms" if k != "e2el" else "e2e_ms": float(v) for k, v in goodput.items()}
    extra = dict(ns.extra_body or {})
    extra.update({k: getattr(ns, k) for k in _PENALTIES if getattr(ns, k) is not None})
    out: dict[str, Any] = {
        "url": ns.base_url or f"http://{ns.host}:{ns.port}", "endpoint": endpoint,
        "model": ns.served_model_name or ns.model, "backend": ns.backend, "label": ns.label,
        "dataset": _DATASETS[ns.dataset_name], "dataset_path": ns.dataset_path, "num_requests": ns.num_prompts,
        "input_tokens": ns.input_len or ns.random_input_len, "output_tokens": ns.output_len or ns.random_output_len,
        "random_range_ratio": _range_ratio(ns.random_range_ratio), "rate": ns.request_rate, "arrival": "gamma",
        "burstiness": ns.burstiness, "concurrency": ns.max_concurrency, "seed": ns.seed, "ignore_eos": ns.ignore_eos,
        "warmup_requests": ns.num_warmups, "save_detailed": ns.save_detailed, "metadata": _pairs(ns.metadata, "=",
        "--metadata"), "percentile_metrics": (ns.percentile_metrics or "ttft,tpot,itl").split(","),
        "percentiles": [float(p) for p in str(ns.metric_percentiles).split(",")], "slo": slo, "extra_body": extra,
        "temperature": ns.temperature, "top_p": ns.top_p, "top_k": ns.top_k, "min_p": ns.min_p,
        "progress": not ns.disable_tqdm, "wait_for_server": float(ns.ready_check_timeout_sec),
    }  # fmt: skip
    if ns.tokenizer:
        out["tokenizer"] = ns.tokenizer
    if ns.random_prefix_len and ns.dataset_name == "random":  # one shared prefix, then each prompt's own tokens
        out.update(dataset="shared_prefix", prefix_groups=1, prefix_tokens=ns.random_prefix_len,
                   suffix_tokens=out["input_tokens"])
    return {k: v for k, v in out.items() if v is not None}
