"""``python -m sglang.bench_serving``'s command line, parsed as SGLang parses it and translated into lmmbench's
perf config.

The parser is built from SGLang 0.5.23's own flag list (``sglang_serving_flags.json``, read from its source
by ``benchmarks/extract_sglang_bench_flags.py``): the same names, defaults, types, choices and ``nargs``, with
argparse's prefix abbreviations (SGLang's own usage writes ``--random-input 1024 --num-prompt 10``). Every flag
given a value other than SGLang's default either acts (``translate``) or is refused with one line saying why:
because it acts only inside SGLang's own process, or because this drop-in does not carry it yet (docs/perf.md,
"Coming from SGLang").
"""

from __future__ import annotations

import argparse
import json
import math
from importlib import resources
from typing import Any

from lmmbench.config.dropins.sglang_run import RUN_FLAGS, check_run_flags, run_extra_body
from lmmbench.config.dropins.values import DropInParser, check_sglang_values, check_sharegpt_list
from lmmbench.core.errors import UserError

__all__ = ["SGLANG_DRAWN", "SGLANG_FLAGS", "SGLANG_USAGE", "SGLANG_VERSION", "build_parser", "drawn_by_sglang",
           "refusal", "sglang_defaults", "translate"]  # fmt: skip

SGLANG_VERSION = "0.5.23"
_DATA = json.loads(resources.files("lmmbench.config.dropins").joinpath("sglang_serving_flags.json")
                   .read_text(encoding="utf-8"))  # fmt: skip
SGLANG_FLAGS: list[dict[str, Any]] = _DATA["flags"]
#: the usage lines at the top of SGLang's ``sglang/benchmark/serving.py`` (its documentation of the command)
SGLANG_USAGE: str = _DATA["usage"]

#: backend -> lmmbench endpoint (SGLang's ``_BACKEND_API_PATHS``)
BACKENDS = {"sglang": "generate", "sglang-native": "generate", "sglang-oai": "completions",
            "sglang-oai-chat": "chat", "vllm": "completions", "vllm-chat": "chat", "lmdeploy": "completions",
            "lmdeploy-chat": "chat"}  # fmt: skip
REFUSED_BACKENDS = {
    "sglang-embedding": "embeddings are not generation; lmmbench measures streamed generation",
    "vllm-embedding": "embeddings are not generation; lmmbench measures streamed generation",
    "trt": "TensorRT-LLM's Triton generate_stream API: lmmbench's client speaks OpenAI HTTP and SGLang's /generate",
    "gserver": "a gRPC server, and SGLang's own client for it is unimplemented (it raises NotImplementedError)",
    "truss": "Baseten Truss's predict API: lmmbench's client speaks OpenAI HTTP and SGLang's /generate",
}  # fmt: skip
#: SGLang's default port per backend (``run_benchmark``), 30000 otherwise
_PORTS = {"sglang": 30000, "sglang-native": 30000, "sglang-oai": 30000, "lmdeploy": 23333, "vllm": 8000,
          "vllm-embedding": 8000, "trt": 8000, "gserver": 9988, "truss": 8080}  # fmt: skip
DATASETS = {"sharegpt": "sharegpt", "custom": "sharegpt", "random": "synthetic", "random-ids": "synthetic",
            "generated-shared-prefix": "shared_prefix"}  # fmt: skip
#: where SGLang's ShareGPT file lives on the hub (``sglang/benchmark/datasets/common.py``)
SHAREGPT_REPO, SHAREGPT_FILE = "anon8231489123/ShareGPT_Vicuna_unfiltered", "ShareGPT_V3_unfiltered_cleaned_split.json"
#: flags whose effect lives inside SGLang's own client process, and why lmmbench refuses them
IN_SGLANG_ONLY = {
    "rust_client": "it swaps SGLang's Python client for its Rust one; lmmbench's load generator is its own",
    "rust_worker_threads": "threads of SGLang's Rust client; lmmbench's load generator is its own",
    "plot_throughput": "a terminal plot drawn by SGLang's process (termplotlib); lmmbench writes its plots and "
                       "report.html in the run folder",
    "print_requests": "SGLang's debug printing of each request inside its client",
}  # fmt: skip
#: flags (destinations) this drop-in carries to lmmbench's engine
CARRIED = {
    "backend", "base_url", "host", "port", "ready_check_timeout_sec", "dataset_name", "dataset_path", "model",
    "served_model_name", "tokenizer", "num_prompts", "sharegpt_output_len", "random_input_len",
    "random_output_len", "random_range_ratio", "request_rate", "max_concurrency", "output_file", "output_details",
    "goodput", "disable_tqdm", "seed", "disable_ignore_eos", "temperature", "top_p", "extra_request_body",
    "profile", "warmup_requests", "tag", "gsp_num_groups", "gsp_prompts_per_group", "gsp_system_prompt_len",
    "gsp_question_len", "gsp_output_len", "return_logprob", "top_logprobs_num", "token_ids_logprob",
    "logprob_start_len", "return_routed_experts",
    *RUN_FLAGS,  # the request / run side: headers, streaming, LoRA, cache flush and report, profiler (sglang_bench_run)
    # data sets (datasets.sglang.datasets, datasets.sglang.image_datasets)
    "dataset_offset", "prompt_suffix", "sharegpt_context_len", "tokenize_prompt", "use_trace_timestamps",
    "mooncake_num_rounds", "mooncake_slowdown_factor", "mooncake_workload", "image_content", "image_count",
    "image_format", "image_resolution", "random_image_count", "speed_bench_category", "speed_bench_output_len",
    "gsp_fast_prepare", "gsp_group_distribution", "gsp_num_turns", "gsp_ordered", "gsp_range_ratio",
    "gsp_zipf_alpha", "agentic_max_turns", "apply_chat_template",
}  # fmt: skip
#: data sets whose requests SGLang's own loaders draw (lmmbench.datasets.sglang.datasets / sglang_image_datasets)
SGLANG_DRAWN = ("image", "mmmu", "mooncake", "openai", "agentic-trace", "longbench_v2", "speed-bench")
#: flags only SGLang's loaders know: with one of them, sharegpt / custom / random / generated-shared-prefix are
#: drawn by SGLang's loader too. Only the sharegpt and custom loaders read --apply-chat-template (SGLang's others
#: render their own template or none whatever it says): elsewhere it changes nothing, here as in SGLang.
_LOADER_FLAGS = {"sharegpt": ("prompt_suffix", "sharegpt_context_len", "apply_chat_template"),
                 "custom": ("prompt_suffix", "sharegpt_context_len", "apply_chat_template"),
                 "random": ("tokenize_prompt",),
                 "random-ids": ("tokenize_prompt",),
                 "generated-shared-prefix": ("tokenize_prompt", "gsp_range_ratio", "gsp_fast_prepare", "gsp_num_turns",
                                             "gsp_ordered", "gsp_group_distribution", "gsp_zipf_alpha")}  # fmt: skip
_GOODPUT = ("ttft", "tpot", "e2el")


def _positive_float(value: str) -> float:
    """SGLang's ``_finite_positive_float``."""
    try:
        parsed = float(value)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a finite float > 0, got {value!r}") from None
    if not math.isfinite(parsed) or parsed <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite float > 0, got {value!r}")
    return parsed


def _goodput_slo(pair: str) -> tuple[str, float]:
    """SGLang's ``_goodput_slo``: one KEY:VALUE (milliseconds)."""
    name, _, value = pair.partition(":")
    if name not in _GOODPUT:
        raise argparse.ArgumentTypeError(f"expected KEY:VALUE with KEY in {', '.join(_GOODPUT)}, got {pair!r}")
    return name, _positive_float(value)


_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "_goodput_slo": _goodput_slo,
                          "_finite_positive_float": _positive_float}  # fmt: skip


def _kwargs(f: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"dest": f["dest"], "default": f["default"], "help": f["help"] or None}
    if f["action"] == "_StoreTrueAction":
        kwargs["action"] = "store_true"
        return kwargs
    if f["type"] is not None:
        kwargs["type"] = _TYPES[f["type"]]
    for key in ("nargs", "choices", "metavar"):
        if f.get(key) is not None:
            kwargs[key] = f[key]
    return kwargs


def build_parser() -> argparse.ArgumentParser:
    """``sglang.bench_serving``'s parser, from SGLang's flag list."""
    parser = DropInParser(prog="lmmbench bench sglang", allow_abbrev=True,
                                     description=f"A drop-in for `python -m sglang.bench_serving` (SGLang "
                                                 f"{SGLANG_VERSION}'s flags).")  # fmt: skip
    groups: dict[Any, Any] = {}
    for f in SGLANG_FLAGS:
        target: Any = parser
        if f.get("exclusive_group") is not None:
            if f["exclusive_group"] not in groups:
                groups[f["exclusive_group"]] = parser.add_mutually_exclusive_group()
            target = groups[f["exclusive_group"]]
        target.add_argument(*f["flags"], **_kwargs(f))
    return parser


def sglang_defaults() -> argparse.Namespace:
    """Every flag at SGLang's default."""
    return build_parser().parse_args([])


def refusal(dest: str) -> str:
    """Why flag ``dest`` is refused (only for flags not carried)."""
    flag = next(f["flags"][0] for f in SGLANG_FLAGS if f["dest"] == dest)
    if dest in IN_SGLANG_ONLY:
        return f"{flag}: refused: {IN_SGLANG_ONLY[dest]}"
    return f"{flag}: not supported by lmmbench bench sglang yet (docs/perf.md, 'Coming from SGLang'); drop it"


def _changed(ns: argparse.Namespace) -> list[str]:
    base = sglang_defaults()
    return [f["dest"] for f in SGLANG_FLAGS if getattr(ns, f["dest"]) != getattr(base, f["dest"])]


def _lengths(full: int, ratio: float) -> tuple[int, float]:
    """SGLang draws a length uniformly in [max(int(full * ratio), 1), full]; lmmbench draws it in
    [floor(n(1 - r)), ceil(n(1 + r))] with an integer n: n the middle and r the half-width over n give the same
    upper bound, and the same lower bound when low + full is even (one token lower when it is odd)."""
    low = max(int(full * ratio), 1)
    if low >= full:
        return full, 0.0
    middle = (low + full) // 2
    return middle, (full - middle) / middle - 1e-12  # just under, so that ceil(n(1 + r)) is full itself


def drawn_by_sglang(ns: argparse.Namespace) -> bool:
    """True when SGLang's own loader draws the requests (its data sets, or a flag only that loader knows)."""
    if ns.dataset_name in SGLANG_DRAWN:
        return True
    base = sglang_defaults()
    return any(getattr(ns, k) != getattr(base, k) for k in _LOADER_FLAGS.get(ns.dataset_name, ()))


def _check_loader_flags(ns: argparse.Namespace) -> None:
    """The combinations SGLang refuses (at parse time, or in its loaders), each as one line."""
    name = ns.dataset_name
    if ns.gsp_group_distribution == "zipf" and ns.gsp_zipf_alpha is None:
        raise UserError("--gsp-group-distribution=zipf requires --gsp-zipf-alpha (a finite float > 0)")
    if ns.gsp_group_distribution == "uniform" and ns.gsp_zipf_alpha is not None:
        raise UserError("--gsp-zipf-alpha is only meaningful with --gsp-group-distribution=zipf")
    if ns.tokenize_prompt:
        if name == "generated-shared-prefix" and ns.gsp_num_turns > 1:
            raise UserError("--tokenize-prompt requires --gsp-num-turns=1")
        if ns.backend != "sglang":
            raise UserError("--tokenize-prompt: only with --backend sglang (as SGLang)")
        if name in ("image", "mmmu", "sharegpt", "custom"):
            raise UserError(f"--tokenize-prompt: not with --dataset-name {name} (SGLang refuses it)")
    if name == "mooncake" and ns.backend != "sglang":  # SGLang replays the trace only on its native backend
        raise UserError(f"--dataset-name mooncake: SGLang replays the trace only with --backend sglang (with "
                        f"{ns.backend} its client fails on the trace rows)")  # fmt: skip
    if name == "agentic-trace" and not ns.dataset_path:
        raise UserError(f"--dataset-name {name} needs --dataset-path")
    if ns.image_count < 1 or ns.gsp_num_turns < 1 or ns.mooncake_num_rounds < 1:
        raise UserError("--image-count, --gsp-num-turns and --mooncake-num-rounds must be at least 1")


def _dataset(ns: argparse.Namespace) -> dict[str, Any]:
    """The dataset part of the perf options (a data set SGLang's loader draws: only the count; the session
    draws the requests)."""
    name = ns.dataset_name
    _check_loader_flags(ns)
    if drawn_by_sglang(ns):
        return {"num_requests": ns.num_prompts, "labels": {"sglang_dataset": name}}
    out: dict[str, Any] = {"dataset": DATASETS[name], "num_requests": ns.num_prompts}
    if name.startswith("random"):
        n_in, ratio = _lengths(ns.random_input_len, ns.random_range_ratio)
        n_out, _ = _lengths(ns.random_output_len, ns.random_range_ratio)
        out.update(input_tokens=n_in, output_tokens=n_out, random_range_ratio=ratio)
    elif name in ("sharegpt", "custom"):  # custom: JSON lines of conversations, the same reader
        if name == "custom" and not ns.dataset_path:
            raise UserError("--dataset-name custom needs --dataset-path: a JSONL file of conversations")
        if name == "sharegpt" and ns.dataset_path:  # SGLang's json.load of a list (a JSONL file is lmmbench's)
            check_sharegpt_list(ns.dataset_path, "--dataset-path")
        out.update(dataset_path=ns.dataset_path or None, output_tokens=ns.sharegpt_output_len or 0)
    else:  # generated-shared-prefix: every group gets prompts_per_group requests
        out.update(prefix_groups=ns.gsp_num_groups, prefix_tokens=ns.gsp_system_prompt_len,
                   suffix_tokens=ns.gsp_question_len, output_tokens=ns.gsp_output_len,
                   num_requests=ns.gsp_num_groups * ns.gsp_prompts_per_group)  # fmt: skip
    return out


def _logprob_fields(ns: argparse.Namespace, endpoint: str) -> dict[str, Any]:
    """The logprob / routed-expert fields SGLang's client puts in each request body (under the extra body)."""
    if endpoint == "generate":  # SGLang's native payload; its defaults are the server's, so only changes are sent
        out: dict[str, Any] = {k: getattr(ns, k) for k in ("return_logprob", "return_routed_experts") if getattr(ns, k)}
        if ns.logprob_start_len != -1:
            out["logprob_start_len"] = ns.logprob_start_len
        if ns.top_logprobs_num > 0:
            out["top_logprobs_num"] = ns.top_logprobs_num
        if ns.token_ids_logprob is not None:
            out["token_ids_logprob"] = ns.token_ids_logprob
        return out
    if endpoint == "completions" and ns.return_logprob and ns.top_logprobs_num > 0:
        return {"logprobs": ns.top_logprobs_num}
    return {}  # SGLang's chat backends send none of them


def translate(ns: argparse.Namespace) -> dict[str, Any]:
    """The perf options of a parsed ``sglang.bench_serving`` command line (SGLang's defaults included)."""
    if ns.backend in REFUSED_BACKENDS:
        raise UserError(f"--backend {ns.backend}: refused: {REFUSED_BACKENDS[ns.backend]}")
    for dest in _changed(ns):
        if dest not in CARRIED:
            raise UserError(refusal(dest))
    check_sglang_values(ns)
    try:
        extra = json.loads(ns.extra_request_body) if ns.extra_request_body else {}
    except ValueError as exc:
        raise UserError(f"--extra-request-body: not JSON ({exc})") from None
    if not isinstance(extra, dict):
        raise UserError("--extra-request-body: expected a JSON object")
    check_run_flags(ns)
    endpoint = BACKENDS[ns.backend]
    extra = {**_logprob_fields(ns, endpoint), **extra, **run_extra_body(ns)}  # SGLang's order of merging
    port = ns.port if ns.port is not None else _PORTS.get(ns.backend, 30000)
    host = f"[{ns.host}]" if ":" in ns.host else ns.host
    out: dict[str, Any] = {
        "url": ns.base_url or f"http://{host}:{port}", "endpoint": endpoint, "backend": ns.backend,
        "model": ns.served_model_name or ns.model, "rate": ns.request_rate, "arrival": "poisson",
        "concurrency": ns.max_concurrency, "seed": ns.seed, "ignore_eos": not ns.disable_ignore_eos,
        "temperature": ns.temperature, "warmup_requests": ns.warmup_requests, "extra_body": extra,
        "slo": {("e2e_ms" if k == "e2el" else f"{k}_ms"): v for k, v in (ns.goodput or [])},
        "progress": not ns.disable_tqdm, "wait_for_server": float(max(ns.ready_check_timeout_sec, 0)),
        "keep_text": True, "tokenizer": ns.tokenizer, **_dataset(ns),
    }  # fmt: skip
    if endpoint == "generate" and ns.top_p < 1.0:  # SGLang sends top_p only on its native API, only below 1
        out["top_p"] = ns.top_p
    return {k: v for k, v in out.items() if v is not None}
