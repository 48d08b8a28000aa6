"""The one table of bounds on every count and size lmmbench accepts.

Each default is far above any real run (a concurrency of 100 000 clients, a 10^7-token prompt), so
only a typo or a hostile file meets it; it exists so that such input fails in one line instead of
eating the machine's memory. A bound is raised with the environment variable
``LMMBENCH_LIMIT_<NAME>`` (e.g. ``LMMBENCH_LIMIT_CONCURRENCY=200000``) or the global option
``lmmbench --limit concurrency=200000 ...``. docs/reliability.md lists the table.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from lmmbench.core.errors import UserError

__all__ = ["LIMITS", "Limit", "check_limit", "limit_value"]


@dataclass(frozen=True)
class Limit:
    """One bound: its name, default and what it bounds."""

    name: str
    default: int
    bounds: str

    @property
    def env_var(self) -> str:
        """The environment variable that raises it."""
        return f"LMMBENCH_LIMIT_{self.name.upper()}"


LIMITS: dict[str, Limit] = {
    lim.name: lim
    for lim in (
        Limit("concurrency", 100_000, "concurrent clients of perf (--concurrency, sweeps, workload points)"),
        Limit("requests", 10_000_000, "requests of one perf point (--num-requests, warm-up included)"),
        Limit("input_tokens", 10_000_000, "synthetic prompt length (--input-tokens, workload input_tokens)"),
        Limit("output_tokens", 10_000_000, "output tokens per request (--output-tokens, max_tokens, workload)"),
        Limit("batch_size", 100_000, "batch sizes of workloads and specs"),
        Limit("sweep_points", 10_000, "load points of one run (--rates, --concurrencies, workload points)"),
        Limit("file_bytes", 2 * 1024**3, "size of one YAML / JSON / JSONL / CSV input file read as text"),
        Limit("yaml_nodes", 2_000_000, "nodes of one YAML document once its aliases are expanded"),
        Limit("yaml_depth", 200, "nesting depth of [ ] / { } in one YAML document"),
        Limit("yaml_aliases", 10_000, "alias references (*name) in one YAML document"),
        Limit("csv_field_bytes", 64 * 1024**2, "one CSV field (manifests, task data, results files)"),
        Limit("prompt_chars", 100_000_000, "one rendered prompt / string built by a task template"),
        Limit("media_seconds", 86_400, "one synthetic video or audio duration (media synth), seconds"),
        Limit("image_side", 16_384, "one synthetic image side (media synth), pixels"),
        Limit("body_bytes", 64 * 1024**2, "one HTTP request body accepted by testserver and by lmmbench proxy "
              "(HTTP 413 past it)"),
        Limit("sse_line_bytes", 64 * 1024**2, "one line (or unfinished event) of a server-sent event stream read "
              "by perf's client or lmmbench proxy; past it that request fails (sse_line_too_long)"),
        Limit("sse_idle_s", 600, "seconds a stream read by perf's client or lmmbench proxy may go without a byte "
              "before that request fails (stream_idle)"),
        Limit("answer_bytes", 256 * 1024**2, "one upstream answer lmmbench proxy reads whole or rebuilds from a "
              "stream (HTTP 502 past it)"),
        Limit("answer_index", 4096, "a choice or tool-call index in an upstream answer lmmbench proxy rebuilds "
              "(HTTP 502 past it)"),
        Limit("json_depth", 200, "nesting depth of [ ] / { } in one JSON request body lmmbench proxy reads "
              "(HTTP 400 past it)"),
        Limit("duration_s", 7 * 86_400, "seconds of one load point or schedule (--duration-s, workload perf_time, "
              "the span of a trace's timestamps)"),
        Limit("hash_ids", 100_000, "prefix-block hash ids on one trace line"),
        Limit("episodes", 1_000_000, "episodes of one episodic run (--num-tasks x --num-trials-per-task)"),
        Limit("episode_steps", 1_000_000, "policy steps of one episode (episodic-eval --max-steps)"),
        Limit("include_depth", 100, "files in one chain of `include:`s of an lm-eval task file"),
        Limit("stop_grace_s", 10, "seconds a plan's workers and servers (and perf --server-cmd's) get after "
              "SIGTERM / SIGINT to write what they measured, before SIGKILL"),
        Limit("venvs_kept", 20, "venvs of plan rows kept under $LMMBENCH_HOME/venvs; beyond it the least recently "
              "used are removed after a venv is built or used (`lmmbench envs prune`)"),
        Limit("venvs_bytes", 100 * 1024**3, "bytes (du) of the venvs kept under $LMMBENCH_HOME/venvs, removed "
              "least recently used first as for venvs_kept"),
        Limit("built_images", 64, "images one plan builds for its container rows' requirements (each removed "
              "once its rows ended)"),
    )
}


def limit_value(name: str) -> int:
    """The bound ``name``: ``$LMMBENCH_LIMIT_<NAME>`` if set, else the table's default."""
    lim = LIMITS[name]
    raw = os.environ.get(lim.env_var)
    if raw is None or not raw.strip():
        return lim.default
    try:
        number = float(raw)
    except ValueError:
        raise UserError(f"{lim.env_var}={raw!r}: expected a whole number") from None
    if not math.isfinite(number):
        raise UserError(f"{lim.env_var}={raw!r}: expected a finite whole number")
    value = int(number)
    if value < 1:
        raise UserError(f"{lim.env_var}={raw!r}: must be at least 1")
    return value


def check_limit(name: str, value: float | int | None, what: str) -> None:
    """Raise a ``UserError`` naming ``what`` when ``value`` exceeds the bound ``name``."""
    if value is None:
        return
    if isinstance(value, float) and math.isnan(value):
        raise UserError(f"{what}: NaN is not a number; give a finite value")
    bound = limit_value(name)
    if value > bound:
        lim = LIMITS[name]
        raise UserError(
            f"{what}: {value:g} exceeds the limit {name}={bound} ({lim.bounds}); if you mean it, raise it "
            f"with {lim.env_var}=N or `lmmbench --limit {name}=N ...`"
        )
