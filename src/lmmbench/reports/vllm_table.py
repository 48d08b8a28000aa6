"""The result table ``vllm bench serve`` prints, line for line (vLLM 0.33.0's format), from a vLLM-format result:
scripts that grep it (``Request throughput (req/s):``, ``P99 E2EL (ms):``) find their lines."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["format_result_table"]

_METRICS = (("ttft", "TTFT", "Time to First Token"), ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
            ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency"),
            ("client_queue_time", "Client Queue Time", "Client-side Queueing"),
            ("e2el_including_client_queue", "E2EL incl. Client Queue",
             "Queue-inclusive End-to-end Latency"))  # fmt: skip


def _line(name: str, value: Any, decimals: bool = True) -> str:
    return f"{name:<40} {value:<10.2f}" if decimals else f"{name:<40} {value:<10}"


def format_result_table(result: dict[str, Any], metrics: Sequence[str], percentiles: Sequence[float],
                        request_rate: float, max_concurrency: int | None, goodput: bool) -> str:
    """vLLM's printed summary of one benchmark."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             _line("Successful requests:", result["completed"], False),
             _line("Failed requests:", result.get("failed", 0), False)]  # fmt: skip
    if max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", max_concurrency, False))
    if not math.isinf(request_rate):
        lines.append(_line("Request rate configured (RPS):", request_rate))
    lines += [_line("Benchmark duration (s):", result["duration"]),
              _line("Total input tokens:", result["total_input_tokens"], False),
              _line("Total generated tokens:", result["total_output_tokens"], False),
              _line("Request throughput (req/s):", result["request_throughput"])]  # fmt: skip
    if goodput and result.get("request_goodput") is not None:
        lines.append(_line("Request goodput (req/s):", result["request_goodput"]))
    lines += [_line("Output token throughput (tok/s):", result["output_throughput"]),
              _line("Peak output token throughput (tok/s):", result.get("max_output_tokens_per_s") or 0.0),
              _line("Peak concurrent requests:", result.get("max_concurrent_requests") or 0.0),
              _line("Total token throughput (tok/s):", result["total_token_throughput"])]  # fmt: skip
    if "probe_completed" in result:  # --probe-request-rate
        lines += ["{s:{c}^{n}}".format(s="Probe Requests", n=50, c="-"),
                  _line("Probe requests completed:", result["probe_completed"], False),
                  _line("Probe requests failed:", result["probe_failed"], False),
                  _line("Median probe E2EL (ms):", result["probe_median_e2el_ms"]),
                  _line("P99 probe E2EL (ms):", result["probe_p99_e2el_ms"]),
                  _line("Max probe E2EL (ms):", result["probe_max_e2el_ms"])]  # fmt: skip
    for key, name, header in _METRICS:
        if key not in metrics or f"mean_{key}_ms" not in result:
            continue
        lines += ["{s:{c}^{n}}".format(s=header, n=50, c="-"), _line(f"Mean {name} (ms):", result[f"mean_{key}_ms"]),
                  _line(f"Median {name} (ms):", result[f"median_{key}_ms"])]  # fmt: skip
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            if f"p{word}_{key}_ms" in result:
                lines.append(_line(f"P{word} {name} (ms):", result[f"p{word}_{key}_ms"]))
    lines += _spec_lines(result)
    lines.append("=" * 50)
    return "\n".join(lines)


def _spec_lines(result: dict[str, Any]) -> list[str]:
    """vLLM's "Speculative Decoding" section (when the server's counters moved during the run)."""
    if "spec_decode_acceptance_rate" not in result:
        return []
    lines = ["{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"),
             _line("Acceptance rate (%):", result["spec_decode_acceptance_rate"]),
             _line("Acceptance length:", result["spec_decode_acceptance_length"]),
             _line("Drafts:", int(result["spec_decode_num_drafts"]), False),
             _line("Draft tokens:", int(result["spec_decode_draft_tokens"]), False),
             _line("Accepted tokens:", int(result["spec_decode_accepted_tokens"]), False)]  # fmt: skip
    per_pos = result.get("spec_decode_per_position_acceptance_rates") or []
    if per_pos:
        lines.append("Per-position acceptance (%):")
        lines += [_line(f"  Position {i}:", rate * 100) for i, rate in enumerate(per_pos)]
    return lines
