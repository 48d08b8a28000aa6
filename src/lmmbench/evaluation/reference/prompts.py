"""Prompts of ByteMLPerf's accuracy check, and how many of them each of its measures takes.

ByteMLPerf's dataset is a CSV of 52 prompts (``merged_52_test.csv``: ``id,question,A,B,C,D``): perplexity and
the first-token logits diff run over all 52, the token diff over 16 of them. Here the prompts come from
such a CSV (ByteMLPerf's template: a ``question`` column, its options ``A``..``D`` appended as ``\\nA. ...`` when
present, then ``\\n答案：``; or a ``prompt`` column as it is),
a task (its rendered contexts), a ``.txt`` (one per line) or a ``.jsonl`` (``prompt``); the counts are 52
and 16 when that many exist, else all, and the report says which.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from lmmbench.core.errors import UserError
from lmmbench.datasets.json_lines import read_json_lines

__all__ = ["ANSWER_SUFFIX", "LOGITS_PROMPTS", "TOKEN_DIFF_PROMPTS", "load_prompts", "prompt_counts"]

#: ByteMLPerf's counts: perplexity and the logits diff over 52 prompts, the token diff over 16 of them.
LOGITS_PROMPTS = 52
TOKEN_DIFF_PROMPTS = 16

_OPTIONS = ("A", "B", "C", "D")
#: ByteMLPerf's prompt template (``llm_perf/benchmark/bench.py``, ``format_question``) ends every question so.
ANSWER_SUFFIX = "\n答案："


def prompt_counts(available: int, logits: int = LOGITS_PROMPTS, tokens: int = TOKEN_DIFF_PROMPTS) -> dict[str, int]:
    """How many prompts perplexity / the logits diff and the token diff take out of ``available``."""
    n = min(available, logits)
    return {"available": available, "logits_diff": n, "token_diff": min(n, tokens)}


def _csv_prompts(p: Path) -> list[str]:
    from lmmbench.config.input_files import read_text

    rows = list(csv.DictReader(io.StringIO(read_text(p, "prompt CSV"))))
    cols = set(rows[0]) if rows else set()
    if "question" in cols:
        out = []
        for r in rows:
            options = [f"{k}. {r[k]}" for k in _OPTIONS if r.get(k)]
            out.append("\n".join([r["question"] or "", *options]) + ANSWER_SUFFIX)
        return out
    if "prompt" in cols:
        return [r["prompt"] or "" for r in rows]
    raise UserError(f"{p}: a prompt CSV needs a 'question' column (ByteMLPerf's) or a 'prompt' column")


def _file_prompts(p: Path) -> list[str]:
    if not p.is_file():
        raise UserError(f"{p}: prompt file not found")
    if p.suffix == ".csv":
        return _csv_prompts(p)
    if p.suffix == ".txt":
        from lmmbench.config.input_files import read_text

        return [line.rstrip("\n") for line in read_text(p, "prompt file").splitlines() if line.strip()]
    prompts = []
    for i, row in read_json_lines(p):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise UserError(f"{p}:{i}: expected an object with a string 'prompt'")
        prompts.append(row["prompt"])
    return prompts


def load_prompts(source: str, n: int) -> list[str]:
    """Up to ``n`` prompts from a CSV (ByteMLPerf's dataset), .txt, .jsonl, or a task's rendered contexts."""
    p = Path(source).expanduser()
    if p.suffix in (".csv", ".txt", ".jsonl"):
        prompts = _file_prompts(p)
    else:
        from lmmbench.evaluation.runner import build_jobs
        from lmmbench.evaluation.task_registry import resolve_task

        jobs = build_jobs(resolve_task(source), "reference")
        prompts = [str(j.row["prompt"]) or (j.rolling or "") for j in jobs]
    prompts = [x for x in prompts if x][:n]
    if not prompts:
        raise UserError(f"{source}: no prompts")
    return prompts
