"""``vllm bench serve``'s command line, parsed as vLLM parses it and translated into lmmbench's perf config.

The parser is built from vLLM 0.33.0's own flag list (``vllm_serve_flags.json``, read from its source by
``benchmarks/extract_vllm_bench_flags.py``): the same names, defaults, types, choices and ``nargs`` (space-
separated lists), with argparse's prefix abbreviations and ``--flag=value``. Every flag given a value other than
vLLM's default either acts (``translate``) or is refused with one line saying why: because it acts only inside
vLLM's own process, or because this drop-in does not carry it yet (listed in docs/perf.md, "Coming from vLLM").
"""

from __future__ import annotations

import argparse
import json
import math
import uuid
from importlib import resources
from typing import Any

from lmmbench.config.dropins.values import DropInParser, check_vllm_values
from lmmbench.core.errors import UserError

__all__ = ["IN_VLLM_ONLY", "VLLM_FLAGS", "VLLM_VERSION", "build_parser", "headers", "refusal", "sampling_body",
           "translate"]

VLLM_VERSION = "0.33.0"
VLLM_FLAGS: list[dict[str, Any]] = json.loads(
    resources.files("lmmbench.config.dropins").joinpath("vllm_serve_flags.json").read_text(encoding="utf-8"))["flags"]

_BACKENDS = {"openai": "completions", "vllm": "completions", "openai-chat": "chat"}
#: --dataset-name values this drop-in draws (datasets.vllm.bench_requests and its MORE_SAMPLERS draw them)
_DATASETS = {"random": "random", "random-mm": "random-mm", "sharegpt": "sharegpt", "custom": "custom",
             "prefix_repetition": "prefix_repetition", "custom_image": "custom_image",
             "timed_trace": "timed_trace", "burstgpt": "burstgpt", "spec_bench": "spec_bench", "hf": "hf"}  # fmt: skip
_ENDPOINTS = {"/v1/completions": "completions", "/completions": "completions", "/v1/chat/completions": "chat",
              "/chat/completions": "chat"}  # fmt: skip
_SAMPLING = ("top_p", "top_k", "min_p", "temperature", "frequency_penalty", "presence_penalty", "repetition_penalty")
#: flags whose effect lives inside vLLM's own client process, and why lmmbench refuses them
IN_VLLM_ONLY = {
    "tokenizer_mode": "vLLM's tokenizer implementations (mistral, slow) are vLLM's own; lmmbench reads "
                      "tokenizer.json with the tokenizers library",
    "skip_tokenizer_init": "vLLM's switch to run its client without its tokenizer classes; lmmbench's samplers "
                           "need the tokenizer.json, as vLLM's random datasets need a tokenizer",
}  # fmt: skip
#: flags of datasets, backends and options that belong to features lmmbench does not measure, with why
_OTHER_FEATURES = {
    "random_batch_size": "it batches prompts for vLLM's embeddings and rerank backends, which lmmbench does not "
                         "measure",
    "no_reranker": "it belongs to the random-rerank dataset (rerank backends), which lmmbench does not measure",
    "no_stream": "lmmbench's hf reader always loads the data set whole from the datasets cache and shuffles it "
                 "with datasets' shuffle(seed), which is vLLM's --no-stream order; vLLM's default streaming (a "
                 "buffered shuffle) is not read, so the switch would change nothing here",
}  # fmt: skip
#: flags (destinations) this drop-in carries to lmmbench's engine
_CARRIED = {
    "backend", "base_url", "host", "port", "endpoint", "model", "served_model_name", "tokenizer", "dataset_name",
    "dataset_path", "num_prompts", "random_input_len", "random_output_len", "random_range_ratio", "input_len",
    "output_len", "request_rate", "burstiness", "max_concurrency", "seed", "ignore_eos", "num_warmups",
    "save_result", "save_detailed", "append_result", "result_dir", "result_filename", "label", "metadata",
    "percentile_metrics", "metric_percentiles", "goodput", *_SAMPLING, "extra_body", "disable_tqdm",
    "ready_check_timeout_sec", "profile", "random_prefix_len", "header", "lora_modules", "lora_assignment",
    "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "request_id_prefix", "logprobs",
    "disable_shuffle", "no_oversample", "skip_chat_template", "chat_template_kwargs", "custom_output_len",
    "sharegpt_output_len", "prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
    "prefix_repetition_num_prefixes", "prefix_repetition_output_len", "random_mm_base_items_per_request",
    "random_mm_num_mm_items_range_ratio", "random_mm_limit_mm_per_prompt", "random_mm_bucket_config",
    "enable_multimodal_chat", "trust_remote_code", "use_beam_search", "plot_timeline", "timeline_itl_thresholds",
    "plot_dataset_stats", "insecure", "probe_request_rate", "custom_ensure_client_side_data", "self_timed",
    "timed_trace_chunk_hash_size", "timed_trace_sec_multiplier", "timed_trace_label_timestamp",
    "timed_trace_label_input_length", "timed_trace_label_output_length", "timed_trace_label_hash_ids",
    "hf_name", "hf_split", "hf_subset", "hf_output_len", "spec_bench_category", "spec_bench_output_len",
}  # fmt: skip


def _type(name: str | None) -> Any:
    return {"int": int, "float": float, "str": str, "loads": json.loads}.get(name or "", None if name is None else str)


def build_parser() -> argparse.ArgumentParser:
    """``vllm bench serve``'s parser, from vLLM's flag list."""
    parser = DropInParser(prog="lmmbench bench serve", allow_abbrev=True,
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
    parser.set_defaults(request_id_prefix=f"bench-{uuid.uuid4().hex[:8]}-")  # vLLM: a fresh prefix per run
    return parser


def _percentiles(value: Any) -> list[float]:
    """``--metric-percentiles 25,50,99`` as numbers; anything else is one clear error."""
    try:
        return [float(p) for p in str(value).split(",")]
    except ValueError:
        raise UserError(f"--metric-percentiles {value!r}: comma-separated numbers, e.g. 50,90,99") from None


def refusal(dest: str) -> str:
    """Why flag ``dest`` is refused (only for flags not carried)."""
    flag = next(f["flags"][0] for f in VLLM_FLAGS if f["dest"] == dest)
    if dest in IN_VLLM_ONLY:
        return f"{flag}: refused: it acts inside vLLM's own process: {IN_VLLM_ONLY[dest]}"
    if dest in _OTHER_FEATURES:
        return f"{flag}: refused: {_OTHER_FEATURES[dest]}"
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


def _check(ns: argparse.Namespace) -> str:
    """vLLM's own checks of a command line; returns the API the backend calls (completions or chat)."""
    if ns.backend not in _BACKENDS:
        raise UserError(f"--backend {ns.backend}: lmmbench measures generation on the completions and chat APIs "
                        "(--backend openai, vllm, openai-chat); embeddings, rerank, pooling, responses and audio "
                        "backends are not supported")  # fmt: skip
    if ns.dataset_name not in _DATASETS:
        raise UserError(f"--dataset-name {ns.dataset_name}: not supported by lmmbench bench serve yet; "
                        f"supported: {', '.join(_DATASETS)}")
    api = _BACKENDS[ns.backend]
    if _ENDPOINTS.get(ns.endpoint) != api:  # vLLM's request functions check the URL's ending the same way
        want = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        raise UserError(f"--backend {ns.backend} --endpoint {ns.endpoint}: this backend calls {want}; give "
                        f"--endpoint {want}")
    if ns.dataset_name in ("random-mm", "custom_image") and api != "chat":
        raise UserError(f"--dataset-name {ns.dataset_name} sends images: use --backend openai-chat --endpoint "
                        "/v1/chat/completions (as vLLM)")  # fmt: skip
    if ns.dataset_name == "timed_trace":  # vLLM: pre-tokenized prompts, generated to length, at their timestamps
        if api != "completions":
            raise UserError("--dataset-name timed_trace sends token ids: use --backend vllm or openai (as vLLM)")
        ns.ignore_eos = True
        ns.self_timed = True if ns.self_timed is None else ns.self_timed
    elif ns.self_timed is not None:
        raise UserError("--self-timed / --no-self-timed: only with --dataset-name timed_trace (as vLLM)")
    if ns.plot_dataset_stats and not (ns.save_result or ns.append_result or ns.plot_timeline):
        raise UserError("--plot-dataset-stats writes beside the result file: add --save-result (as vLLM needs)")
    if ns.max_concurrency is not None and ns.max_concurrency <= 0:
        raise UserError("--max-concurrency must be greater than 0")
    if ns.ramp_up_strategy is not None:
        if not math.isinf(ns.request_rate):
            raise UserError("--ramp-up-strategy: do not give --request-rate; the ramp-up sets the rate (as vLLM)")
        if ns.ramp_up_start_rps is None or ns.ramp_up_end_rps is None:
            raise UserError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        if not 0 <= ns.ramp_up_start_rps <= ns.ramp_up_end_rps:
            raise UserError("--ramp-up-start-rps must be at least 0 and at most --ramp-up-end-rps")
        if ns.ramp_up_strategy == "exponential" and ns.ramp_up_start_rps == 0:
            raise UserError("--ramp-up-strategy exponential: --ramp-up-start-rps cannot be 0")
    return api


def sampling_body(ns: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags that were given, then --extra-body over them (vLLM's order)."""
    sampling = {k: getattr(ns, k) for k in _SAMPLING if getattr(ns, k) is not None}
    return {**sampling, **(ns.extra_body or {})}


def headers(ns: argparse.Namespace) -> dict[str, str]:
    """--header KEY=VALUE ... as a dict (vLLM's parsing: split at the first '=', stripped)."""
    return _pairs(ns.header, "=", "--header")


def translate(ns: argparse.Namespace) -> dict[str, Any]:
    """The perf options of a parsed ``vllm bench serve`` command line (vLLM's defaults included); the requests
    themselves are built by ``datasets.vllm.bench_requests``."""
    for dest in _changed(ns):
        if dest not in _CARRIED:
            raise UserError(refusal(dest))
    api = _check(ns)
    check_vllm_values(ns)
    if ns.dataset_name in ("random", "random-mm"):  # vLLM: random datasets generate to the asked length
        ns.ignore_eos = True
    goodput = _pairs(ns.goodput, ":", "--goodput")
    bad = sorted(set(goodput) - {"ttft", "tpot", "e2el"})
    if bad:
        raise UserError(f"--goodput {bad[0]}: vLLM's goodput names are ttft, tpot, e2el")
    try:
        slo = {f"{k}_ms" if k != "e2el" else "e2e_ms": float(v) for k, v in goodput.items()}
    except ValueError:
        raise UserError(f"--goodput {' '.join(ns.goodput)}: each value is milliseconds, e.g. ttft:500") from None
    ramp = ns.ramp_up_strategy is not None or bool(ns.self_timed)  # the schedule is not one rate's
    out: dict[str, Any] = {
        "url": ns.base_url or f"http://{ns.host}:{ns.port}", "endpoint": api,
        "model": ns.served_model_name or ns.model, "backend": ns.backend, "label": ns.label,
        "num_requests": ns.num_prompts, "rate": None if ramp else ns.request_rate, "burstiness": ns.burstiness,
        "concurrency": ns.max_concurrency, "seed": ns.seed, "ignore_eos": bool(ns.ignore_eos),
        "warmup_requests": ns.num_warmups, "save_detailed": ns.save_detailed,
        "metadata": _pairs(ns.metadata, "=", "--metadata"),
        "percentile_metrics": (ns.percentile_metrics or "ttft,tpot,itl").split(","),
        "percentiles": _percentiles(ns.metric_percentiles), "slo": slo,
        "progress": not ns.disable_tqdm, "wait_for_server": float(ns.ready_check_timeout_sec),
        "continuous_usage": True, "insecure": bool(ns.insecure),
    }  # fmt: skip
    if ns.dataset_name in ("random", "random-mm"):  # the asked lengths, for perf's progress line and run log
        out["input_tokens"] = ns.input_len if ns.input_len is not None else ns.random_input_len
        out["output_tokens"] = ns.output_len if ns.output_len is not None else ns.random_output_len
    if ns.tokenizer:
        out["tokenizer"] = ns.tokenizer
    return {k: v for k, v in out.items() if v is not None}
