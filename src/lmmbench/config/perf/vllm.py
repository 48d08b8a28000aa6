"""vLLM's result file and its options on ``lmmbench perf``, and the few vLLM spellings that mean exactly what
they mean in ``vllm bench serve`` (and in ``lmmbench bench serve``, which runs whole vLLM command lines).

``PerfConfig`` inherits ``VllmBenchFlags``; ``CLI_ALIASES`` gives the vLLM spelling of options whose meaning is
the same (``--num-prompts`` is ``--num-requests``), and ``_translate`` maps vLLM's values (``--endpoint
/v1/completions``, ``--goodput ttft:500``, ``--host/--port``, ``--backend``) onto lmmbench's. vLLM spellings
whose effect differs in perf (``--request-rate``: vLLM rescales its gaps; ``--dataset-name`` and the
``--random-*`` lengths: vLLM's samplers) are not perf flags: ``lmmbench bench serve`` takes them as vLLM does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

__all__ = ["PERCENTILE_METRICS", "VLLM_ONLY_FIELDS", "VllmBenchFlags"]

_ENDPOINT_PATHS = {
    "/v1/completions": "completions", "/completions": "completions",
    "/v1/chat/completions": "chat", "/chat/completions": "chat",
}  # fmt: skip
_GOODPUT_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms", "itl": "itl_ms"}
_SAMPLING = ("temperature", "top_p", "top_k", "min_p")
#: Metrics a vLLM-format result can summarise (vLLM's --percentile-metrics names).
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")

#: Fields that exist only for vLLM compatibility (using one prints the compatibility note).
VLLM_ONLY_FIELDS = frozenset({
    "backend", "host", "port", "label", "save_result", "save_detailed", "result_dir", "result_filename",
    "metadata", "random_range_ratio", "percentile_metrics", "temperature", "top_p", "top_k", "min_p",
    "disable_tqdm",
})  # fmt: skip


class VllmBenchFlags(BaseModel):
    """vLLM ``bench serve`` flags without an lmmbench twin (inherited by ``PerfConfig``)."""

    #: vLLM's spelling of options lmmbench has under another name (see lmmbench.config.cli_options).
    CLI_ALIASES: ClassVar[dict[str, tuple[str, ...]]] = {
        "url": ("--base-url",),
        "concurrency": ("--max-concurrency",),
        "num_requests": ("--num-prompts",),
        "slo": ("--goodput",),
        "percentiles": ("--metric-percentiles",),
        "warmup_requests": ("--num-warmups",),
    }

    backend: str | None = Field(
        None, description="vLLM's backend name: openai / vllm call completions, openai-chat calls chat (when "
        "--endpoint is not given); written as the result file's backend."
    )
    host: str | None = Field(None, description="vLLM compatibility: server host (with --port; --url wins).")
    port: int | None = Field(None, ge=1, le=65535, description="vLLM compatibility: server port (with --host).")
    label: str | None = Field(None, description="Label of a vLLM-format result (file name prefix; default: backend).")
    save_result: bool = Field(False, description="Write a vLLM-format result JSON (as vllm bench serve --save-result).")
    save_detailed: bool = Field(False, description="vLLM-format result with per-request lists (ttfts, itls, texts...).")
    result_format: Literal["lmmbench", "vllm"] = Field(
        "lmmbench", description="vllm: also write vLLM's result JSON (lmmbench's files are always written)."
    )
    result_dir: Path | None = Field(None, description="Folder of the vLLM-format result (default: the run folder).")
    result_filename: str | None = Field(None, description="File name of the vLLM-format result (default: vLLM's).")
    metadata: dict[str, str] = Field(default_factory=dict, description="key=value pairs copied into the vLLM result.")
    percentiles: list[float] = Field(
        default_factory=lambda: [50.0, 90.0, 95.0, 99.0], description="Percentiles in summaries and reports."
    )
    percentile_metrics: list[str] = Field(
        default_factory=lambda: ["ttft", "tpot", "itl"],
        description="Metrics of the vLLM-format result with mean/median/std/percentiles (ttft,tpot,itl,e2el).",
    )
    random_range_ratio: float = Field(
        0.0, ge=0, lt=1, description="Synthetic lengths uniform in [n(1-r), n(1+r)] (vLLM's --random-range-ratio)."
    )
    temperature: float | None = Field(None, ge=0, description="Sampling temperature sent with every request.")
    top_p: float | None = Field(None, gt=0, le=1, description="top_p sent with every request.")
    top_k: int | None = Field(None, description="top_k sent with every request.")
    min_p: float | None = Field(None, ge=0, le=1, description="min_p sent with every request.")
    disable_tqdm: bool = Field(False, description="vLLM compatibility: no live progress line (as --no-progress).")
    insecure: bool = Field(False, description="https without checking the server's certificate (vLLM's --insecure).")

    @field_validator("percentiles")
    @classmethod
    def _check_percentiles(cls, v: list[float]) -> list[float]:
        bad = [q for q in v if not 0 < q <= 100]
        if bad:
            raise ValueError(f"percentiles must be in (0, 100], got {bad}")
        return v

    @field_validator("percentile_metrics")
    @classmethod
    def _check_percentile_metrics(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(PERCENTILE_METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {', '.join(PERCENTILE_METRICS)}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _translate(cls, data: Any) -> Any:
        """vLLM's values in lmmbench's terms (runs before field validation)."""
        if not isinstance(data, dict):
            return data
        d = dict(data)
        ep = d.get("endpoint")
        if isinstance(ep, str) and ep in _ENDPOINT_PATHS:
            d["endpoint"] = _ENDPOINT_PATHS[ep]
        elif ep is None and d.get("backend") == "openai-chat":
            d["endpoint"] = "chat"
        elif ep is None and d.get("backend") in ("openai", "vllm"):  # vLLM's completions backends
            d["endpoint"] = "completions"
        burst = d.get("burstiness")
        if burst is not None and float(burst) != 1.0 and d.get("arrival") is None:
            d["arrival"] = "gamma"  # as vLLM: --burstiness shapes the gaps without naming the process
        if isinstance(d.get("slo"), dict):
            d["slo"] = {_GOODPUT_KEYS.get(k, k): v for k, v in d["slo"].items()}
        if d.get("url") is None and (d.get("host") or d.get("port")):
            d["url"] = f"http://{d.get('host') or '127.0.0.1'}:{d.get('port') or 8000}"
        sampling = {k: d[k] for k in _SAMPLING if d.get(k) is not None}
        if sampling:
            d["extra_body"] = {**sampling, **(d.get("extra_body") or {})}
        if d.get("disable_tqdm"):
            d["progress"] = False
        if d.get("save_detailed") and d.get("keep_text") is None:
            d["keep_text"] = True
        return d

    def wants_vllm_result(self) -> bool:
        """True when a vLLM-format result JSON is asked for (--save-result or --result-format vllm)."""
        return self.save_result or self.result_format == "vllm"
