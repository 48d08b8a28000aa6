"""``lmmbench bench sglang``: a ``python -m sglang.bench_serving`` command line run by lmmbench's load generator.

The command line is parsed and translated by ``config.dropins.sglang_serving``; the load runs as any perf run (its
run folder, records, report and run store entry); SGLang's summary block is returned for printing, and SGLang's
output file gets one JSON line appended, where SGLang appends it (``--output-file``, else its default name in the
working directory), every run, as SGLang does. ShareGPT without ``--dataset-path`` is SGLang's file from the
Hugging Face hub, read through the local cache (offline with ``HF_HUB_OFFLINE=1``). SGLang's other data sets,
and its loader flags, are drawn by SGLang's own loaders (``sessions.dropins.sglang_datasets``).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["BenchSglangRun", "run_bench_sglang", "sharegpt_file"]


@dataclass
class BenchSglangRun:
    """What one ``bench sglang`` produced: the summary, the output file, the requests."""

    summary: str
    output_file: Path | None
    sent: int
    ok: int
    run_dir: Path
    interrupted: bool = False


def sharegpt_file() -> Path:
    """SGLang's ShareGPT file from the Hugging Face hub cache (downloaded when online and missing)."""
    from lmmbench.config.dropins.sglang_serving import SHAREGPT_FILE, SHAREGPT_REPO
    from lmmbench.core.hub import hub_cache_dir

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(SHAREGPT_REPO, SHAREGPT_FILE, repo_type="dataset", cache_dir=hub_cache_dir(),
                                    local_files_only=offline))  # fmt: skip
    except Exception as exc:  # huggingface_hub raises many kinds; each is one line here
        raise UserError(f"--dataset-name sharegpt without --dataset-path reads {SHAREGPT_REPO}/{SHAREGPT_FILE} "
                        f"from the Hugging Face hub and it could not be had ({type(exc).__name__}); cache folder "
                        f"{hub_cache_dir()}; give --dataset-path FILE") from None  # fmt: skip


def _server_info(url: str) -> Any:
    """SGLang's ``/server_info`` (null when the server has none), as SGLang records it."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/server_info", timeout=5) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _accept_length(info: Any) -> float | None:
    """SGLang's speculative-decoding accept length, read from ``/server_info`` as SGLang reads it."""
    if not isinstance(info, dict):
        return None
    if isinstance(info.get("decode"), list) and info["decode"]:
        info = info["decode"][0]
    states = info.get("internal_states") if isinstance(info, dict) else None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
        return float(value) if isinstance(value, (int, float)) else None
    return None


def run_bench_sglang(argv: list[str]) -> BenchSglangRun:
    """Parse ``argv`` as ``sglang.bench_serving`` does, run the load, return the summary and the output file."""
    from lmmbench.config.dropins.sglang_run import check_run_flags
    from lmmbench.config.dropins.sglang_serving import build_parser, drawn_by_sglang, translate
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.datasets.perf.registry import load_tokenizer
    from lmmbench.metrics.sglang_result import sglang_benchmark_result
    from lmmbench.reports.sglang_output import append_output_line, format_summary, output_file_name, result_line
    from lmmbench.sessions.dropins.sglang_run import profile, sglang_requests, warmup_and_flush
    from lmmbench.sessions.perf.session import run_perf

    ns = build_parser().parse_args(argv)
    options = translate(ns)
    drawn = None
    if drawn_by_sglang(ns):  # SGLang's own loader draws the requests
        from lmmbench.sessions.dropins.sglang_datasets import draw_sglang_requests

        cfg, drawn = draw_sglang_requests(ns, options, sharegpt_file)
    else:
        if options["dataset"] == "sharegpt" and "dataset_path" not in options:
            options["dataset_path"] = sharegpt_file()
        cfg = PerfConfig.model_validate({**options, "plots": False})
    for warning in check_run_flags(ns):
        print(warning, file=sys.stderr)
    requests = sglang_requests(ns, cfg, drawn)  # headers, LoRA adapters, streamed or not, as SGLang sends them
    cfg = warmup_and_flush(ns, cfg, requests)  # --flush-cache: SGLang's warm-up, then the flush, then the load
    profile(ns, cfg.url, start=True)  # --profile: as SGLang, the server's profiler on around the benchmark
    try:
        run = run_perf(cfg, requests)
    finally:
        profile(ns, cfg.url, start=False)
    sent, ok = run.request_counts()
    if not run.results:
        return BenchSglangRun("", None, sent, ok, run.run_dir, run.interrupted)
    res = run.results[0]
    tok = load_tokenizer(cfg.tokenizer) if cfg.tokenizer is not None else None
    result = sglang_benchmark_result(res.records, duration_s=res.summary.duration_s, tokenizer=tok,
                                     goodput_ms=dict(ns.goodput) if ns.goodput else None,
                                     streamed=not ns.disable_stream, cache_report=ns.cache_report)  # fmt: skip
    info = _server_info(cfg.url)  # once: recorded in the output line, and SGLang's accept length on its backends
    result["accept_length"] = _accept_length(info) if ns.backend.startswith("sglang") else None
    vision = ns.dataset_name in ("image", "mmmu")
    if vision:  # SGLang splits the prompt with the model's processor; lmmbench has the server's total only
        result["total_input_text_tokens"] = result["total_input_vision_tokens"] = None
    rate = "trace" if ns.use_trace_timestamps else ns.request_rate  # SGLang's label of --use-trace-timestamps
    summary = format_summary(result, backend=ns.backend, request_rate=rate, max_concurrency=ns.max_concurrency,
                             vision=vision)  # fmt: skip
    head = {**vars(ns), "request_rate": rate}
    line = result_line(result, head, info, ns.output_details)
    (run.run_dir / "sglang_result.json").write_text(json.dumps(line), encoding="utf-8")  # kept whatever happens next
    path = append_output_line(output_file_name(ns), line)
    return BenchSglangRun(summary, path, sent, ok, run.run_dir, run.interrupted)
