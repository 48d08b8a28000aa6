"""Speculative-decoding counters of a vLLM server around one load point, as ``vllm bench serve`` reads them into
its result file (vLLM 0.33.0's ``fetch_spec_decode_metrics`` and the ``spec_decode_*`` keys of ``benchmark()``).

The ``vllm:spec_decode_num_*_total`` counters are summed over every label set (engine, model) before and after the
load; the result keys come from their increments: acceptance rate in percent (accepted / draft tokens), acceptance
length (1 + accepted / drafts), the counts, and the per-position acceptance rates (accepted at a position / drafts).
A server without these counters gives no keys (as vLLM).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from typing import Any

from lmmbench.loadgen.server_metrics import parse_prometheus

__all__ = ["parse_spec_decode", "scrape_spec_decode", "spec_decode_keys"]

_PREFIX = "vllm:spec_decode_num_"
_POSITION = re.compile(r'position="?(\d+)"?')


def parse_spec_decode(text: str) -> dict[str, Any] | None:
    """The spec-decode counters of one Prometheus page, summed over engines (None without them)."""
    scrape = {k: v for k, v in parse_prometheus(text).items() if k.startswith(_PREFIX) and k.endswith("_total")}
    if not scrape:
        return None
    per_pos: dict[int, float] = {}
    for key, value in scrape.get(f"{_PREFIX}accepted_tokens_per_pos_total", {}).items():
        m = _POSITION.search(key)
        if m:
            per_pos[int(m.group(1))] = per_pos.get(int(m.group(1)), 0.0) + value

    def total(name: str) -> float:
        return sum(scrape.get(f"{_PREFIX}{name}_total", {}).values())

    return {"drafts": total("drafts"), "draft_tokens": total("draft_tokens"), "accepted": total("accepted_tokens"),
            "per_pos": per_pos}


def scrape_spec_decode(base_url: str, timeout_s: float = 5.0) -> dict[str, Any] | None:
    """The summed spec-decode counters of the server at ``base_url`` now (None without them)."""
    from lmmbench.core.secrets import url_credentials

    clean, basic = url_credentials(base_url)  # user:password@ is credentials, never part of the host name
    url = clean.rstrip("/").removesuffix("/v1") + "/metrics"
    try:
        req = urllib.request.Request(url, headers={"Authorization": basic} if basic else {})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return parse_spec_decode(text)


def spec_decode_keys(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """vLLM's ``spec_decode_*`` result keys from two scrapes ({} when either lacks them or nothing was drafted)."""
    if before is None or after is None:
        return {}
    drafts = int(after["drafts"] - before["drafts"])
    draft_tokens = int(after["draft_tokens"] - before["draft_tokens"])
    accepted = int(after["accepted"] - before["accepted"])
    if draft_tokens <= 0 or drafts <= 0:  # nothing drafted, or a server without the drafts counter
        return {}
    positions = sorted(set(before["per_pos"]) | set(after["per_pos"]))
    per_pos = [(after["per_pos"].get(p, before["per_pos"].get(p, 0)) - before["per_pos"].get(p, 0)) / drafts
               for p in positions] if drafts > 0 else []  # fmt: skip
    return {"spec_decode_acceptance_rate": accepted / draft_tokens * 100,
            "spec_decode_acceptance_length": 1 + accepted / drafts,
            "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": draft_tokens,
            "spec_decode_accepted_tokens": accepted, "spec_decode_per_position_acceptance_rates": per_pos}  # fmt: skip
