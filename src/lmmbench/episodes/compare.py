"""Traces of episodes on disk, and the check that two runs of the same episodes agree.

A trace is what the policy produced for one episode: raw action-expert chunks (float arrays) or
generated token ids per turn (chat). ``<spec>_traces.jsonl`` gets one line per episode as it
ends (floats written with ``repr``, so they read back bit-exact). ``compare_runs`` reports, for
the episodes two runs share: those whose success or step count differ, the largest absolute
action difference, and for token traces the first divergence (episode, turn, token index).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["EpisodeOutcome", "TraceFile", "compare_runs", "read_traces", "trace_to_json"]


@dataclass
class EpisodeOutcome:
    """What the equivalence check compares for one episode."""

    success: bool | None
    steps: int
    trace: list[Any]


def trace_to_json(trace: Iterable[Any]) -> list[Any]:
    """Arrays become nested lists of floats; token id lists stay lists of ints."""
    out: list[Any] = []
    for item in trace:
        tolist = getattr(item, "tolist", None)
        out.append(tolist() if callable(tolist) else item)
    return out


class TraceFile:
    """Appends one JSON line per episode and flushes it (kept across ``--resume``)."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self._fh = path.open("a" if resume else "w", encoding="utf-8")

    def append(self, episode_id: str, outcome: EpisodeOutcome) -> None:
        """One episode's outcome and trace."""
        line = {"id": episode_id, "success": outcome.success, "steps": outcome.steps,
                "trace": trace_to_json(outcome.trace)}
        self._fh.write(json.dumps(line) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def read_traces(path: Path) -> dict[str, EpisodeOutcome]:
    """Episode id -> outcome of a traces file (a later line for an id wins)."""
    if not path.is_file():
        raise UserError(f"--reference {path}: no such traces file (a run's <out-dir>/episodic-eval/"
                        "episodic-eval_traces.jsonl)")
    from lmmbench.config.input_files import read_text

    out: dict[str, EpisodeOutcome] = {}
    for n, line in enumerate(read_text(path, "traces file").splitlines(), 1):  # bounded; non-UTF-8 names the file
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[str(row["id"])] = EpisodeOutcome(row["success"], int(row["steps"]), list(row["trace"]))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise UserError(f"{path} line {n}: not a traces line ({type(exc).__name__}: {str(exc)[:120]}); "
                            "give a run's episodic-eval_traces.jsonl") from None  # fmt: skip
    return out


def _flat(x: Any) -> list[float]:
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _flat(item)]
    return [float(x)]


def _token_trace(trace: list[Any]) -> bool:
    return bool(trace) and all(isinstance(t, list) and all(isinstance(v, int) for v in t) for t in trace)


def _first_token_divergence(a: list[Any], b: list[Any]) -> dict[str, int] | None:
    for turn, (ta, tb) in enumerate(zip(a, b, strict=False)):
        if ta != tb:
            index = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))
            return {"turn": turn, "token": index}
    if len(a) != len(b):
        return {"turn": min(len(a), len(b)), "token": 0}
    return None


def compare_runs(run: Mapping[str, EpisodeOutcome], reference: Mapping[str, EpisodeOutcome],
                 tolerance: float = 1e-5) -> dict[str, Any]:
    """How ``run`` differs from ``reference`` on the episodes both have."""
    shared = sorted(set(run) & set(reference))
    outcome_diffs = [{"episode": e, "success": [run[e].success, reference[e].success],
                      "steps": [run[e].steps, reference[e].steps]}
                     for e in shared if (run[e].success, run[e].steps) != (reference[e].success, reference[e].steps)]
    max_diff: float | None = None
    divergences: list[dict[str, Any]] = []
    token_episodes = 0
    for e in shared:
        a, b = trace_to_json(run[e].trace), trace_to_json(reference[e].trace)
        if _token_trace(a) or _token_trace(b):
            token_episodes += 1
            where = _first_token_divergence(a, b)
            if where is not None:
                divergences.append({"episode": e, **where})
            continue
        for ca, cb in zip(a, b, strict=False):
            fa, fb = _flat(ca), _flat(cb)
            if len(fa) == len(fb) and fa:
                d = max(abs(x - y) for x, y in zip(fa, fb, strict=True))
                max_diff = d if max_diff is None or not math.isfinite(d) else max(max_diff, d)
    return {
        "episodes_compared": len(shared),
        "outcome_mismatches": outcome_diffs,
        "same_outcomes": not outcome_diffs,
        "max_action_abs_diff": max_diff,
        "max_action_abs_diff_text": None if max_diff is None else f"{max_diff:.6e}",  # JSON rounds floats
        "actions_within_tolerance": None if max_diff is None else max_diff <= tolerance,
        "tolerance": tolerance,
        "token_divergences": divergences,
        "first_token_divergence": divergences[0] if divergences else None,
        "same_transcripts": (not divergences) if token_episodes else None,
    }
