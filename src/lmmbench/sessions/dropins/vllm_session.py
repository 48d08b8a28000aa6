"""``lmmbench bench serve``: a ``vllm bench serve`` command line run by lmmbench's load generator.

The command line is parsed and translated by ``config.dropins.vllm_serve``; the load runs as any perf run (its
run folder, records, report and run store entry); vLLM's result table is printed to standard output, and vLLM's
result file is written where vLLM writes it — the working directory or ``--result-dir``, under vLLM's file name
or ``--result-filename``, appended to with ``--append-result`` — only when ``--save-result`` or
``--append-result`` asks for it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["BenchServeRun", "run_bench_serve"]


@dataclass
class BenchServeRun:
    """What one ``bench serve`` produced: the table, the result file (if asked for), the requests."""

    table: str
    result_file: Path | None
    sent: int
    ok: int
    run_dir: Path
    interrupted: bool = False


def _post(url: str, path: str, hdrs: dict[str, str]) -> None:
    """POST ``path`` on the server (vLLM's /start_profile, /stop_profile, with --header); a refusal is one line."""
    import urllib.error
    import urllib.request

    from lmmbench.core.errors import UserError

    base = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(urllib.request.Request(base + path, data=b"", method="POST", headers=hdrs),
                                    timeout=60):  # fmt: skip
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"--profile: {base + path} failed ({exc}); start the server with its profiler enabled "
                        "(vLLM: VLLM_TORCH_PROFILER_DIR)") from None


def _file_name(ns: Any, model: str, date: str) -> str:
    """vLLM's result file name (``compute_result_filename``)."""
    if ns.result_filename:
        return str(ns.result_filename)
    conc = f"-concurrency{ns.max_concurrency}" if ns.max_concurrency is not None else ""
    label, base = ns.label or ns.backend, model.split("/")[-1]
    if ns.ramp_up_strategy is not None:
        return (f"{label}-ramp-up-{ns.ramp_up_strategy}-{ns.ramp_up_start_rps}qps-{ns.ramp_up_end_rps}qps{conc}-"
                f"{base}-{date}.json")
    return f"{label}-{ns.request_rate}qps{conc}-{base}-{date}.json"


def _result_path(ns: Any, model: str, date: str) -> Path | None:
    """Where vLLM writes its result file (and its figures beside it); None when nothing asks for one."""
    if not (ns.plot_timeline or ns.save_result or ns.append_result):
        return None
    from lmmbench.core.errors import UserError

    folder = Path(ns.result_dir) if ns.result_dir else Path.cwd()
    target = folder / _file_name(ns, model, date)  # an absolute --result-filename wins, as os.path.join's
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--result-dir / --result-filename: cannot create {target.parent} ({exc})") from None
    return target


def _vllm_json(ns: Any, result: dict[str, Any]) -> str:
    """The result as vLLM writes it: its traffic keys, the per-request lists only with --save-detailed."""
    from lmmbench.metrics.vllm_result import DETAILED_KEYS

    out = {k: v for k, v in result.items() if ns.save_detailed or k not in DETAILED_KEYS}
    if ns.ramp_up_strategy is not None:  # vLLM's traffic keys of a ramp-up run
        out["request_rate"] = "inf"
        keys = list(out)
        at = keys.index("max_concurrency") + 1
        ramp = {"ramp_up_strategy": ns.ramp_up_strategy, "ramp_up_start_rps": ns.ramp_up_start_rps,
                "ramp_up_end_rps": ns.ramp_up_end_rps}  # fmt: skip
        out = {**{k: out[k] for k in keys[:at]}, **ramp, **{k: out[k] for k in keys[at:]}}
    return json.dumps(out)  # one line, as vLLM's json.dump writes


def _itl_thresholds(ns: Any) -> list[float]:
    """--timeline-itl-thresholds as two numbers (ms)."""
    from lmmbench.core.errors import UserError

    try:
        limits = [float(t) for t in str(ns.timeline_itl_thresholds).split(",")]
    except ValueError:
        limits = []
    if len(limits) != 2:
        raise UserError(f"--timeline-itl-thresholds {ns.timeline_itl_thresholds}: two numbers, e.g. 25,50 (ms)")
    return limits


def check_outputs(ns: Any) -> None:
    """The output flags checked before the load (a wrong one is found before anything is measured, not after):
    the timeline thresholds, --plot-dataset-stats's result file, and that the result folder can be made."""
    from lmmbench.core.errors import UserError

    if ns.plot_timeline:
        _itl_thresholds(ns)
    wants_file = ns.plot_timeline or ns.save_result or ns.append_result
    if ns.plot_dataset_stats and not wants_file:
        raise UserError("--plot-dataset-stats writes beside the result file: add --save-result (as vLLM needs)")
    if wants_file:
        folder = Path(ns.result_dir) if ns.result_dir else Path.cwd()
        target = folder / (ns.result_filename or "result.json")  # an absolute --result-filename wins
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--result-dir / --result-filename: cannot create {target.parent} ({exc})") from None
        if not os.access(target.parent, os.W_OK):
            raise UserError(f"--result-dir / --result-filename: {target.parent} is not writable")


def _place_result(ns: Any, result: dict[str, Any], target: Path | None) -> Path | None:
    """Write (or append) the vLLM-format result and the figures asked for where vLLM writes them."""
    from lmmbench.reports.vllm_plots import write_dataset_stats, write_timeline

    if target is None:  # check_outputs refused --plot-dataset-stats without a result file before the load
        return None
    if ns.plot_timeline:
        write_timeline(result, target.with_suffix(".timeline.html"), _itl_thresholds(ns))
    if ns.plot_dataset_stats:
        write_dataset_stats(result, target.with_suffix(".dataset_stats.png"))
    if not (ns.save_result or ns.append_result):
        return None
    if ns.append_result and target.is_file() and target.stat().st_size:
        with target.open("a", encoding="utf-8") as fh:
            fh.write("\n" + _vllm_json(ns, result))
    else:
        target.write_text(_vllm_json(ns, result), encoding="utf-8")
    return target


def _tokenizer(ns: Any) -> tuple[Any, Path | None]:
    """vLLM's tokenizer choice (--tokenizer, else the model's), read as tokenizer.json (a local dir, a hub id or
    a built-in model's name: tiny-llm's tokenizer, the model built on first use)."""
    from lmmbench.core.errors import UserError
    from lmmbench.core.hub import looks_like_hub_id, resolve_hub_snapshot
    from lmmbench.datasets.vllm.samplers import VllmTokenizer

    name = ns.tokenizer or ns.model
    if not name:
        raise UserError("give --tokenizer (a tokenizer directory or hub id) or --model: vLLM's samplers need the "
                        "model's tokenizer")  # fmt: skip
    from lmmbench.models.tiny import TINY_MODEL_NAMES, build_tiny_model

    path = Path(name)
    if not path.exists() and str(name) in TINY_MODEL_NAMES:  # a built-in model's tokenizer, as perf takes it
        path = build_tiny_model(str(name))
    elif not path.exists() and looks_like_hub_id(str(name)):
        path = Path(resolve_hub_snapshot(str(name), "--tokenizer", ["tokenizer*", "*.json", "*.txt"]).path)
    if not path.exists():
        raise UserError(f"--tokenizer {name}: no such tokenizer directory, hub id in the local cache or built-in "
                        f"model ({', '.join(TINY_MODEL_NAMES)})")  # fmt: skip
    return VllmTokenizer.load(path), path


def build_bench_requests(ns: Any, align_url: str | None = None) -> tuple[list[Any], Path | None]:
    """The drawn requests of a parsed (and translated) command line, as vLLM sends them, with send times;
    ``align_url``: the server whose tokenizer random / prefix_repetition prompts are re-aligned to (as vLLM)."""
    from lmmbench.config.dropins.vllm_serve import headers, sampling_body
    from lmmbench.datasets.vllm import hub_samplers as vllm_hub_samplers  # noqa: F401  (registers burstgpt, spec_bench, hf)
    from lmmbench.datasets.vllm.bench_requests import build_vllm_requests, draw_samples
    from lmmbench.datasets.vllm.samplers import VllmRng

    tok, tok_path = _tokenizer(ns)
    rngs = VllmRng(ns.seed)
    samples = draw_samples(ns, tok, rngs, tok_path)
    if align_url is not None and ns.dataset_name in ("random", "prefix_repetition"):
        from lmmbench.sessions.dropins.vllm_align import align_to_server_tokenizer

        samples = align_to_server_tokenizer(samples, align_url, str(ns.model or ns.served_model_name or ""))
    if not samples:
        from lmmbench.core.errors import UserError

        raise UserError(f"--dataset-name {ns.dataset_name}: no request was drawn")
    model = ns.served_model_name or ns.model
    return build_vllm_requests(ns, samples, model, rngs, sampling_body(ns), headers(ns)), tok_path


def _start_probes(ns: Any, url: str, first: Any) -> Any:
    """vLLM's probe loop (--probe-request-rate): the first request's body, its text "Hi", one output token."""
    if not ns.probe_request_rate or ns.probe_request_rate <= 0:
        return None
    import os

    from lmmbench.sessions.dropins.vllm_probes import ProbeLoop

    body = dict(first.payload)
    if "messages" in body:
        body.update(messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                    max_completion_tokens=1)  # fmt: skip
    else:
        body.update(prompt="Hi", max_tokens=1)
    body.update(stream=True, stream_options={"include_usage": True})
    hdrs = dict(first.headers)
    if os.environ.get("OPENAI_API_KEY"):
        hdrs["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    return ProbeLoop(url, ns.endpoint, body, hdrs, float(ns.probe_request_rate)).start()


def _before_metrics(result: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """``extra`` keys after the benchmark's counts and before the metric summaries (where vLLM puts them)."""
    if not extra or not result:
        return result
    keys = list(result)
    at = next((i for i, k in enumerate(keys) if k.startswith("mean_")), len(keys))
    return {**{k: result[k] for k in keys[:at]}, **extra, **{k: result[k] for k in keys[at:]}}


def _rps_events(ns: Any, requests: list[Any], start: datetime) -> list[dict[str, Any]]:
    """vLLM's ``rps_change_events`` of a ramp-up: each whole rate reached, with the wall time it was reached."""
    from datetime import timedelta

    from lmmbench.datasets.vllm.bench_requests import request_rates

    last = int(ns.ramp_up_start_rps)
    events = [{"rps": last, "timestamp": start.isoformat()}]
    for req, rate in zip(requests, request_rates(len(requests), ns), strict=True):
        if int(rate) > last:
            at = (start + timedelta(microseconds=(req.arrival_ns or 0) / 1e3)).isoformat()
            events += [{"rps": v, "timestamp": at} for v in range(last + 1, int(rate) + 1)]
            last = int(rate)
    return events


def run_bench_serve(argv: list[str]) -> BenchServeRun:
    """Parse ``argv`` as ``vllm bench serve`` does, run the load, return the table and the result file."""
    from lmmbench.config.dropins.vllm_serve import build_parser, headers, translate
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.reports.vllm_table import format_result_table
    from lmmbench.sessions.perf.session import run_perf

    ns = build_parser().parse_args(argv)
    options = translate(ns)
    check_outputs(ns)
    requests, tok_path = build_bench_requests(ns, options["url"])
    options.update(num_requests=len(requests), tokenizer=str(tok_path) if tok_path else None)
    cfg = PerfConfig.model_validate({**{k: v for k, v in options.items() if v is not None}, "save_result": True,
                                     "save_detailed": True, "result_filename": "vllm_result.json",
                                     "plots": False})  # fmt: skip
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    if ns.profile:  # as vLLM: the server's profiler on around the benchmark
        _post(cfg.url, "/start_profile", headers(ns))
    from lmmbench.loadgen.spec_decode import scrape_spec_decode, spec_decode_keys

    spec_before = scrape_spec_decode(cfg.url)
    probes = _start_probes(ns, cfg.url, requests[0])
    started = datetime.now()
    try:
        run = run_perf(cfg, requests)
    finally:
        if probes is not None:
            probes.stop()
        if ns.profile:
            _post(cfg.url, "/stop_profile", headers(ns))
    written = run.run_dir / "vllm_result.json"
    sent, ok = run.request_counts()
    result: dict[str, Any] = json.loads(written.read_text(encoding="utf-8")) if written.is_file() else {}
    from lmmbench.sessions.dropins.vllm_probes import probe_stats

    result = _before_metrics(result, probe_stats(probes) if probes is not None else None)
    if ns.ramp_up_strategy is not None:
        result = _before_metrics(result, {"rps_change_events": _rps_events(ns, requests, started)})
    result = _before_metrics(result, spec_decode_keys(spec_before, scrape_spec_decode(cfg.url)) or None)
    table = format_result_table(result, cfg.percentile_metrics, cfg.percentiles, float(ns.request_rate),
                                ns.max_concurrency, bool(cfg.slo)) if result else ""  # fmt: skip
    model = ns.model or (run.results[0].model if run.results else cfg.model) or ""  # vLLM: the server's first
    placed = _place_result(ns, result, _result_path(ns, str(model), date)) if result else None
    return BenchServeRun(table, placed, sent, ok, run.run_dir, run.interrupted)
