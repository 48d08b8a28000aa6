"""vLLM's speculative-decoding summary of a ``bench serve`` run (vLLM 0.33.0's ``fetch_spec_decode_metrics``): the
server's ``vllm:spec_decode_*_total`` counters read from ``/metrics`` before and after the load; their increments
give the acceptance rate (%), the acceptance length and the per-position acceptance rates (keys
``spec_decode_*``, the table's "Speculative Decoding" section). A server without those counters adds nothing.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

__all__ = ["parse_spec_counters", "read_spec_counters", "spec_decode_stats"]


def parse_spec_counters(text: str) -> dict[str, Any] | None:
    """The summed ``vllm:spec_decode`` counters of a Prometheus page (all engines), or None without any."""
    out: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": {}}
    found = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("vllm:spec_decode"):
            continue
        parts = line.split(None, 1)
        name = parts[0].split("{")[0]
        if not name.endswith("_total"):
            continue
        found = True
        try:
            value = int(float(line.rsplit(None, 1)[-1]))
        except ValueError:
            continue
        if "num_drafts" in name:
            out["drafts"] += value
        elif "num_draft_tokens" in name:
            out["draft_tokens"] += value
        elif "num_accepted_tokens_per_pos" in name and 'position="' in line:
            start = line.index('position="') + len('position="')
            pos = int(line[start:line.index('"', start)])
            out["per_pos"][pos] = out["per_pos"].get(pos, 0) + value
        elif "num_accepted_tokens" in name:
            out["accepted"] += value
    return out if found else None


def read_spec_counters(url: str) -> dict[str, Any] | None:
    """The counters of the server at ``url`` (its ``/metrics``), or None when it has none or does not answer."""
    base = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            return parse_spec_counters(resp.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def spec_decode_stats(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """vLLM's ``spec_decode_*`` result keys from the counters' increments (None when no draft token was made)."""
    if before is None or after is None:
        return None
    drafts = after["drafts"] - before["drafts"]
    draft_tokens = after["draft_tokens"] - before["draft_tokens"]
    accepted = after["accepted"] - before["accepted"]
    if draft_tokens <= 0:
        return None
    per_pos: list[float] = []
    if drafts > 0:
        for pos in sorted(set(before["per_pos"]) | set(after["per_pos"])):
            done = after["per_pos"].get(pos, before["per_pos"].get(pos, 0)) - before["per_pos"].get(pos, 0)
            per_pos.append(done / drafts)
    return {"spec_decode_acceptance_rate": accepted / draft_tokens * 100,
            "spec_decode_acceptance_length": 1 + accepted / drafts if drafts > 0 else 0.0,
            "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": draft_tokens,
            "spec_decode_accepted_tokens": accepted, "spec_decode_per_position_acceptance_rates": per_pos}  # fmt: skip
