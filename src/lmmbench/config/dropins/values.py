"""The values of the drop-ins' flags (``bench serve``: vLLM's, ``bench sglang``: SGLang's), checked before the
server is contacted, each refusal naming its flag.

vLLM and SGLang check some of these themselves (a burstiness of 0, a ratio outside [0, 1), a goodput below 0) and
crash or silently misbehave on the others (a NaN rate, a negative count, a percentile of 101, a port of 70000);
lmmbench refuses every such value in one line, at least as strictly as the peer, and bounds every count, length
and size the drop-ins generate by the limits table (``config.limits``), so a typo fails in one line instead of
allocating gigabytes or waiting for ever.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError

__all__ = [
    "VLLM_PERCENTILE_METRICS",
    "VLLM_RESULT_KEYS",
    "DropInParser",
    "check_number",
    "check_port",
    "check_sglang_values",
    "check_sharegpt_list",
    "check_vllm_values",
]

#: the metrics vLLM's --percentile-metrics accepts
VLLM_PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
#: the keys lmmbench writes into vLLM's result file itself: --metadata may not overwrite them
VLLM_RESULT_KEYS = frozenset({
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput", "input_lens",
    "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx", "server_queue_times", "server_ttfts",
    "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps", "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length", "spec_decode_num_drafts", "spec_decode_draft_tokens",
    "spec_decode_accepted_tokens", "spec_decode_per_position_acceptance_rates", "rps_change_events",
    "probe_requests",
})  # fmt: skip
_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(\.\d+)?)_\w+_ms$")


class DropInParser(argparse.ArgumentParser):
    """The peers' parser, whose errors are one line (``--request-rate: invalid float value: 'fast'; see --help``)
    instead of argparse's usage block of 75-82 lines; ``--help`` still prints every flag."""

    def error(self, message: str) -> NoReturn:
        text = message.removeprefix("argument ")
        raise UserError(f"{text}; see {self.prog} --help")


def check_number(value: Any, flag: str, *, low: float | None = None, low_open: bool = False,
                 high: float | None = None, high_open: bool = False, inf_ok: bool = False) -> None:  # fmt: skip
    """Refuse ``value`` (not None) when it is NaN, infinite (unless ``inf_ok``), or outside the range."""
    if value is None:
        return
    number = float(value)
    if math.isnan(number):
        raise UserError(f"{flag} nan: not a number; give a finite value")
    if math.isinf(number) and not (inf_ok and number > 0):
        raise UserError(f"{flag} {value}: give a finite value")
    if math.isinf(number):
        return
    lo_bad = low is not None and (number <= low if low_open else number < low)
    hi_bad = high is not None and (number >= high if high_open else number > high)
    if lo_bad or hi_bad:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
        hi = "" if high is None else f"{'<' if high_open else '<='} {high:g}"
        raise UserError(f"{flag} {value}: must be {' and '.join(x for x in (lo, hi) if x)}")


def check_port(port: Any, flag: str) -> None:
    """A TCP port: 1 to 65535."""
    if port is not None and not 1 <= int(port) <= 65535:
        raise UserError(f"{flag} {port}: a TCP port is 1 to 65535")


def _check_url(url: str | None, flag: str) -> None:
    if not url:
        return
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        raise UserError(f"{flag} {url}: not a usable URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{flag} {url}: give an http:// or https:// URL with a host")


def _length(value: Any, flag: str, limit: str, low: int = 0) -> None:
    """A length (tokens) or count at least ``low`` and within the limits table's ``limit``."""
    if value is None:
        return
    check_number(value, flag, low=low)
    check_limit(limit, value, flag)


def _pairs_have_values(items: list[str] | None, flag: str) -> None:
    for item in items or []:
        key, found, value = item.partition("=")
        if not found or not key.strip() or not value.strip():
            raise UserError(f"{flag} {item!r}: expected KEY=VALUE")


def _check_schedule_span(rate: float, prompts: Any) -> None:
    """The schedule of ``prompts`` requests at ``rate`` per second spans ~prompts / rate seconds: within
    ``duration_s`` before any send time is converted to nanoseconds (1e-300 req/s would overflow)."""
    if isinstance(rate, (int, float)) and 0 < rate < math.inf and isinstance(prompts, int) and prompts > 1:
        check_limit("duration_s", (prompts - 1) / rate, f"--request-rate {rate:g} with --num-prompts {prompts}: the "
                    "schedule's span in seconds")  # fmt: skip


def _check_vllm_rates(ns: argparse.Namespace) -> None:
    check_number(ns.request_rate, "--request-rate", low=0, low_open=True, inf_ok=True)
    _check_schedule_span(ns.request_rate, ns.num_prompts)
    check_number(ns.burstiness, "--burstiness", low=0, low_open=True, inf_ok=True)  # inf: evenly spaced
    check_number(ns.probe_request_rate, "--probe-request-rate", low=0)
    check_number(ns.ramp_up_start_rps, "--ramp-up-start-rps", low=0)
    check_number(ns.ramp_up_end_rps, "--ramp-up-end-rps", low=0)
    check_number(ns.timed_trace_sec_multiplier, "--timed-trace-sec-multiplier", low=0, low_open=True)
    for name in ("top_p", "min_p", "temperature", "frequency_penalty", "presence_penalty", "repetition_penalty"):
        check_number(getattr(ns, name), f"--{name.replace('_', '-')}")


def _check_vllm_lengths(ns: argparse.Namespace) -> None:
    _length(ns.num_prompts, "--num-prompts", "requests")
    _length(ns.num_warmups, "--num-warmups", "requests")
    check_limit("requests", ns.num_prompts + ns.num_warmups, "--num-prompts + --num-warmups")
    _length(ns.max_concurrency, "--max-concurrency", "concurrency", low=1)
    for name in ("random_input_len", "input_len", "random_prefix_len", "prefix_repetition_prefix_len",
                 "prefix_repetition_suffix_len"):  # fmt: skip
        _length(getattr(ns, name), f"--{name.replace('_', '-')}", "input_tokens")
    for name in ("random_output_len", "output_len", "prefix_repetition_output_len", "sharegpt_output_len",
                 "hf_output_len", "spec_bench_output_len"):  # fmt: skip
        _length(getattr(ns, name), f"--{name.replace('_', '-')}", "output_tokens", low=1)
    if ns.custom_output_len != -1:  # -1: each row's own output_tokens (vLLM)
        _length(ns.custom_output_len, "--custom-output-len", "output_tokens", low=1)
    check_limit("input_tokens", ns.random_input_len + ns.random_prefix_len, "--random-input-len + --random-prefix-len")
    _length(ns.prefix_repetition_num_prefixes, "--prefix-repetition-num-prefixes", "requests", low=1)
    _length(ns.random_mm_base_items_per_request, "--random-mm-base-items-per-request", "requests")
    _length(ns.timed_trace_chunk_hash_size, "--timed-trace-chunk-hash-size", "input_tokens", low=1)
    _length(ns.logprobs, "--logprobs", "output_tokens")
    _length(ns.ready_check_timeout_sec, "--ready-check-timeout-sec", "duration_s")


def _check_vllm_reporting(ns: argparse.Namespace) -> None:
    metrics = [m.strip() for m in (ns.percentile_metrics or "ttft,tpot,itl").split(",")]
    bad = [m for m in metrics if m not in VLLM_PERCENTILE_METRICS]
    if bad:
        raise UserError(f"--percentile-metrics {ns.percentile_metrics}: {bad[0]!r} is not one of vLLM's metrics "
                        f"({', '.join(VLLM_PERCENTILE_METRICS)})")  # fmt: skip
    for p in str(ns.metric_percentiles).split(","):
        try:
            number = float(p)
        except ValueError:
            raise UserError(f"--metric-percentiles {ns.metric_percentiles!r}: comma-separated numbers, e.g. "
                            "50,90,99") from None  # fmt: skip
        check_number(number, f"--metric-percentiles {ns.metric_percentiles}:", low=0, high=100)
    for item in ns.goodput or []:
        value = item.partition(":")[2]
        try:
            number = float(value)
        except ValueError:
            continue  # translate names the malformed pair
        if not math.isfinite(number) or number < 0:
            raise UserError(f"--goodput {item}: an SLO is a non-negative number of milliseconds (as vLLM)")
    _pairs_have_values(ns.metadata, "--metadata")
    for item in ns.metadata or []:
        key = item.partition("=")[0].strip()
        if key in VLLM_RESULT_KEYS or _STAT_KEY.match(key):
            raise UserError(f"--metadata {item}: {key!r} is a key lmmbench measures or records in the result "
                            "file; give your value another name")  # fmt: skip


def _check_vllm_ratio(value: Any) -> None:
    """--random-range-ratio: a number, or {"input": r, "output": r}, each in [0, 1) (vLLM's rule)."""
    import json

    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        raise UserError(f"--random-range-ratio {value!r}: a number, or {{\"input\": r, \"output\": r}}") from None
    ratios = parsed.values() if isinstance(parsed, dict) else [parsed]
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, float)):
            raise UserError(f"--random-range-ratio {value!r}: a number, or {{\"input\": r, \"output\": r}}")
        check_number(r, f"--random-range-ratio {value}:", low=0, high=1, high_open=True)


def _check_seed(seed: Any) -> None:
    """numpy's generators take a seed in [0, 2**32 - 1] (the peers seed numpy with it and crash otherwise)."""
    if seed is not None and not 0 <= int(seed) <= 2**32 - 1:
        raise UserError(f"--seed {seed}: must be from 0 to {2**32 - 1} (numpy's seed range)")


def check_vllm_values(ns: argparse.Namespace) -> None:
    """Every value of a parsed ``vllm bench serve`` command line, before the server is contacted."""
    _check_seed(ns.seed)
    _check_vllm_ratio(ns.random_range_ratio)
    check_port(ns.port, "--port")
    _check_url(ns.base_url, "--base-url")
    _check_vllm_rates(ns)
    _check_vllm_lengths(ns)
    _check_vllm_reporting(ns)
    _pairs_have_values(ns.header, "--header")
    for name in ("extra_body", "chat_template_kwargs", "random_mm_limit_mm_per_prompt"):
        value = getattr(ns, name)
        if value is not None and not isinstance(value, dict):
            raise UserError(f"--{name.replace('_', '-')}: expected a JSON object, got {type(value).__name__}")


def _check_sglang_lengths(ns: argparse.Namespace) -> None:
    _length(ns.num_prompts, "--num-prompts", "requests", low=1)
    _length(ns.warmup_requests, "--warmup-requests", "requests")
    _length(ns.max_concurrency, "--max-concurrency", "concurrency", low=1)
    _length(ns.gsp_num_groups, "--gsp-num-groups", "requests", low=1)
    _length(ns.gsp_prompts_per_group, "--gsp-prompts-per-group", "requests", low=1)
    check_limit("requests", ns.gsp_num_groups * ns.gsp_prompts_per_group,
                "--gsp-num-groups x --gsp-prompts-per-group")  # fmt: skip
    low = 1 if ns.dataset_name.startswith("random") else 0  # a random prompt has at least one token
    _length(ns.random_input_len, "--random-input-len", "input_tokens", low=low)
    for name in ("gsp_system_prompt_len", "gsp_question_len", "sharegpt_context_len"):
        _length(getattr(ns, name), f"--{name.replace('_', '-')}", "input_tokens")
    for name in ("random_output_len", "gsp_output_len", "sharegpt_output_len", "speed_bench_output_len"):
        _length(getattr(ns, name), f"--{name.replace('_', '-')}", "output_tokens")
    _length(ns.dataset_offset, "--dataset-offset", "requests")
    _length(ns.image_count, "--image-count", "requests", low=1)
    _length(ns.gsp_num_turns, "--gsp-num-turns", "requests", low=1)
    _length(ns.mooncake_num_rounds, "--mooncake-num-rounds", "requests", low=1)
    _length(ns.agentic_max_turns, "--agentic-max-turns", "requests", low=1)
    _length(ns.top_logprobs_num, "--top-logprobs-num", "output_tokens")
    _length(ns.ready_check_timeout_sec, "--ready-check-timeout-sec", "duration_s")  # a negative wait: refused


def check_sglang_values(ns: argparse.Namespace) -> None:
    """Every value of a parsed ``sglang.bench_serving`` command line, before the server is contacted."""
    _check_seed(ns.seed)
    check_port(ns.port, "--port")
    _check_url(ns.base_url, "--base-url")
    check_number(ns.request_rate, "--request-rate", low=0, low_open=True, inf_ok=True)
    _check_schedule_span(ns.request_rate, ns.num_prompts)
    check_number(ns.random_range_ratio, "--random-range-ratio", low=0, high=1)
    check_number(ns.gsp_range_ratio, "--gsp-range-ratio", low=0, high=1)
    check_number(ns.temperature, "--temperature", low=0)
    check_number(ns.top_p, "--top-p", low=0, low_open=True, high=1)
    check_number(ns.lora_zipf_alpha, "--lora-zipf-alpha", low=0, low_open=True)
    check_number(ns.mooncake_slowdown_factor, "--mooncake-slowdown-factor", low=0, low_open=True)
    _check_sglang_lengths(ns)
    _pairs_have_values(ns.header, "--header")
    _check_output_folder(ns.output_file, "--output-file")


def _check_output_folder(path: Any, flag: str) -> None:
    """The folder of an output file exists and is writable (SGLang appends to the file after the whole load)."""
    if not path:
        return
    if Path(str(path)).is_dir():
        raise UserError(f"{flag} {path}: a folder; give a file to append the results to, e.g. "
                        f"{Path(str(path)) / 'results.jsonl'}")
    folder = Path(str(path)).parent
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: the folder {folder} does not exist; create it first")
    import os

    if not os.access(folder, os.W_OK):
        raise UserError(f"{flag} {path}: the folder {folder} is not writable")


def check_sharegpt_list(path: Any, flag: str) -> None:
    """A ShareGPT file is a JSON list (SGLang's and vLLM's ``json.load``): one that holds a single object is
    refused by name before anything is drawn (only its first bytes are read here)."""
    p = Path(str(path))
    if not p.is_file():
        raise UserError(f"{flag} {path}: file not found")
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head and not head.startswith(b"["):
        raise UserError(f"{flag} {path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} objects, "
                        "not a single object")  # fmt: skip
