"""The request and run side of ``python -m sglang.bench_serving``'s flags, as SGLang 0.5.23 acts on them
(``sglang/benchmark/serving.py``): the HTTP headers of every request (``--header``, ``--gsp-send-routing-key``),
whether responses are streamed (``--disable-stream``), the LoRA adapter of each request (``--lora-name`` drawn
by ``--lora-request-distribution``), the fields SGLang adds to every body (``--cache-report``,
``--fake-prefill``), the cache flush between warm-up and load (``--flush-cache``), and the profiler calls around
the load (``--profile`` with its ``--profile-*`` options, to the prefill / decode workers with ``--pd-separated``).

Pure functions of the parsed command line: the session (``sessions.bench_sglang_admin``) sends what they describe.
"""

from __future__ import annotations

import argparse
import os
import random
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["FAKE_BOOTSTRAP_HOST", "ROUTING_KEY_HEADER", "RUN_FLAGS", "check_run_flags", "flush_target",
           "lora_names", "profile_calls", "request_headers", "routing_key_prefix", "run_extra_body"]  # fmt: skip

#: SGLang's ``sglang.srt.disaggregation.utils.FAKE_BOOTSTRAP_HOST``: a decode server with the fake transfer
#: backend takes a request bootstrapped from this host as already prefilled
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
#: the header SGLang's client sends a request's routing key in (``_ROUTING_KEY_HEADER``)
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
#: the destinations of the flags this module carries
RUN_FLAGS = {
    "header", "disable_stream", "lora_name", "lora_request_distribution", "lora_zipf_alpha", "flush_cache",
    "flush_cache_timeout", "profile_activities", "profile_by_stage", "profile_decode_url", "profile_num_steps",
    "profile_output_dir", "profile_prefill_url", "profile_prefix", "profile_stages", "profile_start_step",
    "profile_steps", "pd_separated", "cache_report", "fake_prefill", "gsp_send_routing_key",
}  # fmt: skip
_SGLANG_BACKENDS = ("sglang", "sglang-native", "sglang-oai", "sglang-oai-chat")


def check_run_flags(ns: argparse.Namespace) -> list[str]:
    """SGLang's own checks of these flags (its asserts, as one-line errors); returns its warnings."""
    if ns.lora_request_distribution in ("distinct", "skewed") and not (ns.lora_name and len(ns.lora_name) > 1):
        raise UserError(f"--lora-request-distribution {ns.lora_request_distribution}: give more than one adapter "
                        "with --lora-name (as SGLang requires)")  # fmt: skip
    if not ns.lora_zipf_alpha > 1:
        raise UserError(f"--lora-zipf-alpha {ns.lora_zipf_alpha}: must be greater than 1 (as SGLang requires)")
    warnings = []
    if ns.cache_report and ns.backend not in _SGLANG_BACKENDS:
        warnings.append("WARNING: --cache-report is only supported with sglang backends.")
    if ns.profile and ns.pd_separated and not (ns.profile_prefill_url or ns.profile_decode_url):
        warnings.append("Warning: PD separated mode requires --profile-prefill-url or --profile-decode-url; "
                        "skipping profiler start. Please specify worker URLs for profiling.")  # fmt: skip
    return warnings


def request_headers(ns: argparse.Namespace) -> dict[str, str]:
    """``--header KEY=VALUE ...`` as SGLang parses it (``parse_custom_headers``): split at the first '=', not
    stripped (an entry with an empty key or value, which SGLang drops, is refused by config.dropins.values)."""
    out: dict[str, str] = {}
    for item in ns.header or []:
        key, _, value = item.partition("=")
        if key and value:
            out[key] = value
    return out


def routing_key_prefix() -> str:
    """The per-run part of SGLang's routing keys: 8 random hex digits and the start time (``_<group>`` follows)."""
    return f"{uuid.uuid4().hex[:8]}_{datetime.now().strftime('%Y%m%d%H%M%S')}"


def lora_names(ns: argparse.Namespace, n: int) -> list[str] | None:
    """The LoRA adapter of each of ``n`` requests, drawn as SGLang draws them (None without ``--lora-name``).

    uniform: one ``random.choice`` per request from Python's generator seeded with ``--seed`` (SGLang seeds the
    process-wide one with it); distinct: the names in turn; skewed: Zipf weights ``alpha ** -i`` over the names in
    their order, one weighted draw per request from the same seeded generator. SGLang's process-wide generators
    are also drawn from by its data set sampling and arrival times first, so the sequence equals SGLang's only
    where nothing drew before it (uniform with ``--dataset-name random-ids``); the distribution is SGLang's."""
    names = list(ns.lora_name or [])
    if not names:
        return None
    if ns.lora_request_distribution == "distinct":
        return [names[i % len(names)] for i in range(n)]
    rng = random.Random(ns.seed)
    if ns.lora_request_distribution == "skewed":
        weights = [ns.lora_zipf_alpha ** -i for i in range(len(names))]
        return rng.choices(names, weights=weights, k=n)
    return [rng.choice(names) for _ in range(n)]


def run_extra_body(ns: argparse.Namespace) -> dict[str, Any]:
    """The fields SGLang adds to every request body after ``--extra-request-body`` (so they win over it)."""
    out: dict[str, Any] = {}
    if ns.cache_report and ns.backend in ("sglang-oai", "sglang-oai-chat"):
        out["return_cached_tokens_details"] = True  # SGLang's OpenAI API then reports sglext.cached_tokens_details
    if ns.fake_prefill:
        out.update(bootstrap_host=FAKE_BOOTSTRAP_HOST, bootstrap_room=0)
    return out


def flush_target(ns: argparse.Namespace, base_url: str) -> str | None:
    """The URL SGLang POSTs to flush the server's prefix cache after the warm-up (None: no flush): with
    ``--flush-cache``, or on an SGLang backend when ``SGLANG_IS_IN_CI`` is true, as SGLang does."""
    in_ci = os.environ.get("SGLANG_IS_IN_CI", "false").lower() in ("true", "1")
    if not (ns.flush_cache or ("sglang" in ns.backend and in_ci)):
        return None
    base = base_url.rstrip("/")
    if ns.backend.startswith("vllm"):
        return base + "/reset_prefix_cache"
    if ns.backend.startswith("sglang"):
        return f"{base}/flush_cache?timeout={ns.flush_cache_timeout}"
    return base + "/flush_cache"


def _profile_body(ns: argparse.Namespace, start: bool) -> dict[str, Any]:
    """SGLang's ``async_request_profile`` body; the start body names a fresh trace folder (created here, as
    SGLang creates it on the client's machine)."""
    body: dict[str, Any] = {}
    if start:
        num_steps = ns.profile_num_steps
        if ns.profile_by_stage and num_steps is None:
            num_steps = 5
        folder = ns.profile_output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        out_dir = Path(os.path.abspath(os.path.normpath(folder))) / str(time.time())
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--profile-output-dir {folder}: cannot create {out_dir} ({exc})") from None
        body = {"activities": ns.profile_activities, "num_steps": num_steps, "profile_by_stage": ns.profile_by_stage,
                "profile_stages": ns.profile_stages, "output_dir": str(out_dir), "profile_prefix": ns.profile_prefix}
    if ns.profile_start_step is not None:
        body["start_step"] = str(ns.profile_start_step)
    if ns.profile_steps is not None:
        body["num_steps"] = str(ns.profile_steps)
    return body


def profile_calls(ns: argparse.Namespace, base_url: str, start: bool) -> list[tuple[str, dict[str, Any]]]:
    """The profiler POSTs (URL, JSON body) SGLang sends before (``start``) or after the load; none without
    ``--profile``. With ``--pd-separated`` they go to each ``--profile-prefill-url`` / ``--profile-decode-url``
    worker; the stop is skipped with ``--profile-steps`` (the server stops itself), and, on one server, with
    ``--profile-num-steps``."""
    if not ns.profile:
        return []
    if not start and (ns.profile_steps is not None or (not ns.pd_separated and ns.profile_num_steps is not None)):
        return []
    path = "/start_profile" if start else "/stop_profile"
    if ns.pd_separated:
        urls = [*(ns.profile_prefill_url or []), *(ns.profile_decode_url or [])]
    else:
        urls = [base_url.rstrip("/")]
    return [(url + path, _profile_body(ns, start)) for url in urls]
