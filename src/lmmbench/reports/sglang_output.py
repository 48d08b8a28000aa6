"""What ``python -m sglang.bench_serving`` prints and writes (SGLang 0.5.23's format), from an SGLang-keyed result:
the summary block line for line (scripts that grep ``Mean TTFT (ms):`` or ``Output token throughput (tok/s):``
find their lines) and one JSON line appended to its output file, named as SGLang names it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["append_output_line", "format_summary", "output_file_name", "result_line"]

_HEAD_KEYS = ("tag", "backend", "dataset_name", "request_rate", "max_concurrency", "sharegpt_output_len",
              "random_input_len", "random_output_len", "random_range_ratio")  # fmt: skip
_GOODPUT_KEYS = ("goodput_slos_ms", "request_goodput", "slo_attainment", "slo_attainment_by_metric")
_SECTIONS = (("End-to-End Latency", "E2E Latency", "e2e_latency"), ("Time to First Token", "TTFT", "ttft"),
             ("Time per Output Token (excl. 1st token)", "TPOT", "tpot"),
             ("Inter-Token Latency", "ITL", "itl"))  # fmt: skip


def _num(name: str, value: Any) -> str:
    """SGLang's ``{:<40} {:<10.2f}``; a value not measured (null) prints as ``n/a``."""
    return f"{name:<40} {value:<10.2f}" if isinstance(value, (int, float)) else f"{name:<40} {'n/a':<10}"


def _txt(name: str, value: Any) -> str:
    return f"{name:<40} {'n/a' if value is None else value!s:<10}"


def format_summary(res: dict[str, Any], *, backend: str, request_rate: float | str, max_concurrency: int | None,
                   vision: bool = False) -> str:
    """SGLang's printed ``Serving Benchmark Result`` block (``vision``: the image data sets' vision-token line)."""
    lines = ["\n" + "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="), _txt("Backend:", backend),
             _txt("Traffic request rate:", request_rate),
             _txt("Max request concurrency:", max_concurrency if max_concurrency else "not set"),
             _txt("Successful requests:", res["completed"]), _num("Benchmark duration (s):", res["duration"]),
             _txt("Total input tokens:", res["total_input_tokens"]),
             _txt("Total input text tokens:", res["total_input_text_tokens"]),
             *([_txt("Total input vision tokens:", res["total_input_vision_tokens"])] if vision else []),
             _txt("Total generated tokens:", res["total_output_tokens"]),
             _txt("Total generated tokens (retokenized):", res["total_output_tokens_retokenized"]),
             _num("Request throughput (req/s):", res["request_throughput"]),
             _num("Input token throughput (tok/s):", res["input_throughput"]),
             _num("Output token throughput (tok/s):", res["output_throughput"]),
             _num("Peak output token throughput (tok/s):", res["max_output_tokens_per_s"]),
             _txt("Peak concurrent requests:", res["max_concurrent_requests"]),
             _num("Total token throughput (tok/s):", res["total_throughput"]),
             _num("Concurrency:", res["concurrency"])]  # fmt: skip
    if res.get("accept_length"):
        lines.append(_num("Accept length:", res["accept_length"]))
    if res.get("goodput_slos_ms"):
        slos = " ".join(f"{k}:{v:g}" for k, v in res["goodput_slos_ms"].items())
        lines += ["{s:{c}^{n}}".format(s="Goodput", n=50, c="-"), _txt("SLOs (ms):", slos),
                  _num("Request goodput (req/s):", res["request_goodput"]),
                  _num("SLO attainment (%):", res["slo_attainment"] * 100)]  # fmt: skip
        lines += [_num(f"{k.upper()} SLO attainment (%):", v * 100) for k, v in res["slo_attainment_by_metric"].items()]
    for header, name, key in _SECTIONS:
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines += [_num(f"{stat.capitalize() if stat in ('mean', 'median') else stat.upper()} {name} (ms):",
                       res[f"{stat}_{key}_ms"]) for stat in ("mean", "median", "p90", "p95", "p99")]  # fmt: skip
    lines.append(_num("Max ITL (ms):", res["max_itl_ms"]))
    if "cache_report" in res:
        lines += _cache_lines(res["cache_report"])
    lines.append("=" * 50)
    return "\n".join(lines)


def _cache_lines(rep: dict[str, Any]) -> list[str]:
    """SGLang's ``Cache Hit Details`` block (``--cache-report``); a total not reported prints as ``n/a``."""
    cached, out = rep["total_cached_tokens"], ["{s:{c}^{n}}".format(s="Cache Hit Details", n=50, c="-")]
    out += [_txt("Total prompt tokens:", rep["total_prompt_tokens"]), _txt("Total cached tokens:", cached)]
    storage = f"  Storage ({rep['storage_backend']}):" if rep["storage_backend"] else "  Storage:"
    tiers = rep["device_cached_tokens"] is not None and bool(cached)
    if tiers:
        out += [_txt("  Device:", rep["device_cached_tokens"]), _txt("  Host:", rep["host_cached_tokens"])]
        out += [_txt(storage, rep["storage_cached_tokens"])] if rep["storage_cached_tokens"] else []
    rate = rep["cache_hit_rate_pct"]
    out.append(f"{'Cache hit rate:':<40} {rate:.1f}%" if rate is not None else _txt("Cache hit rate:", None))
    if tiers:
        out += [f"{'  Device:':<40} {rep['device_cached_tokens'] / cached * 100:.1f}%",
                f"{'  Host:':<40} {rep['host_cached_tokens'] / cached * 100:.1f}%"]  # fmt: skip
        if rep["storage_cached_tokens"]:
            out.append(f"{storage:<40} {rep['storage_cached_tokens'] / cached * 100:.1f}%")
    return out


def result_line(res: dict[str, Any], head: dict[str, Any], server_info: Any, details: bool) -> dict[str, Any]:
    """The JSON object SGLang appends to its output file (with ``--output-details``, the per-request lists)."""
    body = {k: v for k, v in res.items() if k not in ("details", "max_itl_ms", "cache_report")
            and k not in _GOODPUT_KEYS}  # fmt: skip
    out: dict[str, Any] = {**{k: head.get(k) for k in _HEAD_KEYS}, "server_info": server_info, **body}
    out.update({k: res[k] for k in (*_GOODPUT_KEYS, "cache_report") if k in res})  # SGLang's order
    if details:
        out.update(res["details"])
    return out


def output_file_name(ns: Any, now: datetime | None = None) -> str:
    """SGLang's ``--output-file``, else its default name (in the working directory)."""
    if ns.output_file:
        return str(ns.output_file)
    day = (now or datetime.now()).strftime("%m%d")
    if ns.dataset_name == "image":
        return (f"{ns.backend}_{day}_{ns.num_prompts}_{ns.random_input_len}_{ns.random_output_len}_"
                f"{ns.image_count}imgs_{ns.image_resolution}.jsonl")
    if ns.dataset_name.startswith("random"):
        return f"{ns.backend}_{day}_{ns.num_prompts}_{ns.random_input_len}_{ns.random_output_len}.jsonl"
    return f"{ns.backend}_{day}_{ns.num_prompts}_{ns.dataset_name}.jsonl"


def append_output_line(path: str, line: dict[str, Any]) -> Path:
    """Append one JSON line, as SGLang does (``open(name, "a")``; ``/dev/null`` works)."""
    from lmmbench.core.errors import UserError

    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
    except OSError as exc:
        raise UserError(f"--output-file {path}: cannot append to it ({exc.strerror}); the run itself is in "
                        "lmmbench-results/perf/ (sglang_result.json)") from None
    return Path(path)
