"""Structured workloads of ``lmmbench perf``: multi-turn conversations, shared-prefix groups, trace replay.

- ``multiturn``: ShareGPT's full conversations (``--dataset-path``) or synthetic ones (``--turns``).
  Turn k sends the whole history (the user turns and the conversation's recorded assistant turns,
  or synthetic ones) and is sent ``--think-time-ms`` after turn k-1 completed (the driver chains
  them, ``PerfRequest.next_turn``); only first turns follow the rate or concurrency.
- ``shared_prefix``: ``--prefix-groups`` G groups, each with its own ``--prefix-tokens`` P-token
  prefix, every request that prefix plus its own ``--suffix-tokens`` S-token suffix.
- ``trace``: one request per line, sent at the line's arrival time (``--trace-time-scale``), with
  its input and output lengths: Mooncake's JSONL (``timestamp`` ms, ``input_length``,
  ``output_length``, ``hash_ids``: blocks of ``--trace-block-tokens`` tokens; equal ids give equal
  text, so a prefix cache sees the trace's sharing) or Azure's LLM inference CSV
  (``TIMESTAMP,ContextTokens,GeneratedTokens``).
"""

from __future__ import annotations

import csv
import io
import math
import random
from datetime import datetime
from pathlib import Path
from typing import Any

from lmmbench.config.input_files import read_text
from lmmbench.config.limits import check_limit
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.datasets.json_lines import parse_json_lines
from lmmbench.datasets.perf.registry import (
    PERF_DATASETS,
    count_tokens,
    output_length,
    request_body,
    synthetic_prompt,
    token_pool,
)

__all__ = ["read_trace"]

_Turns = list[tuple[str, str]]  # (user text, assistant text) per turn


def _sharegpt_conversations(path: Path) -> list[_Turns]:
    from lmmbench.datasets.perf.registry import _read_json_rows

    convs: list[_Turns] = []
    for _lineno, row in _read_json_rows(path):
        turns = row.get("conversations") or row.get("conversation") if isinstance(row, dict) else None
        if not isinstance(turns, list):
            continue
        pairs: _Turns = []
        msgs = [t for t in turns if isinstance(t, dict)]
        for j, t in enumerate(msgs):
            if t.get("from", t.get("role")) in ("human", "user"):
                reply = msgs[j + 1] if j + 1 < len(msgs) else {}
                text = str(t.get("value", t.get("content", "")))
                if text.strip():
                    pairs.append((text, str(reply.get("value", reply.get("content", "")))))
        if pairs:
            convs.append(pairs)
    if not convs:
        raise UserError(f"{path}: no ShareGPT conversations (rows with 'conversations': [{{from, value}}])")
    return convs


def _synthetic_conversations(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[_Turns]:
    pool = token_pool(tok)
    convs: list[_Turns] = []
    total = 0
    while total < n:
        k = min(cfg.turns, n - total)
        out_len = cfg.output_tokens or 32
        convs.append([(synthetic_prompt(tok, pool, cfg.input_tokens, rng)[0],
                       synthetic_prompt(tok, pool, out_len, rng)[0]) for _ in range(k)])  # fmt: skip
        total += k
    return convs


@PERF_DATASETS.register("multiturn")
def _multiturn(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    if cfg.dataset_path is not None:
        base = _sharegpt_conversations(cfg.dataset_path)
        rng.shuffle(base)
        convs: list[_Turns] = []
        total = 0
        while total < n:
            conv = base[len(convs) % len(base)][: n - total]
            convs.append(conv)
            total += len(conv)
    else:
        convs = _synthetic_conversations(cfg, n, tok, rng)
    out: list[PerfRequest] = []
    for c, conv in enumerate(convs):
        history: list[dict[str, str]] = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
        for k, (user, reply) in enumerate(conv):
            history.append({"role": "user", "content": user})
            max_tokens = output_length(cfg, rng, count_tokens(tok, reply) or None)
            body = request_body(cfg, "", max_tokens)
            if cfg.endpoint == "chat":
                body["messages"] = [dict(m) for m in history]
            else:
                body["prompt"] = "\n".join(m["content"] for m in history)
            in_len = sum(count_tokens(tok, m["content"]) for m in history)
            last = k == len(conv) - 1
            out.append(PerfRequest(len(out), body, cfg.endpoint, in_len, max_tokens,
                                   labels={"conversation": c, "turn": k}, turn=k,
                                   next_turn=None if last else len(out) + 1,
                                   think_ns=int(cfg.think_time_ms * 1e6)))  # fmt: skip
            history.append({"role": "assistant", "content": reply})
    return out


@PERF_DATASETS.register("shared_prefix")
def _shared_prefix(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    pool = token_pool(tok)
    prefixes = [synthetic_prompt(tok, pool, cfg.prefix_tokens, rng)[0] for _ in range(cfg.prefix_groups)]
    groups = [i % cfg.prefix_groups for i in range(n)]
    rng.shuffle(groups)
    out = []
    for i, g in enumerate(groups):
        text = prefixes[g] + " " + synthetic_prompt(tok, pool, cfg.suffix_tokens, rng)[0]
        max_tokens = output_length(cfg, rng, 32)
        out.append(PerfRequest(i, request_body(cfg, text, max_tokens), cfg.endpoint, count_tokens(tok, text),
                               max_tokens, labels={"prefix_group": g}))  # fmt: skip
    return out


def _azure_time_s(raw: str, where: str) -> float:
    text = raw.strip()
    if "." in text:  # Azure writes 7 fractional digits; datetime reads at most 6
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UserError(f"{where}: TIMESTAMP '{raw}' is not a date-time like 2023-11-16 18:15:46.6805900") from None


def read_trace(path: Path, fmt: str, limit: int) -> list[tuple[float, int, int, list[int]]]:
    """The first ``limit`` lines of a trace: (arrival s from the first line, input, output, hash_ids)."""
    if fmt == "auto":
        fmt = "azure" if path.suffix.lower() == ".csv" else "mooncake"
    rows: list[tuple[float, int, int, list[int]]] = []
    if fmt == "azure":
        with io.StringIO(read_text(path, "trace"), newline="") as fh:  # bounded; a BOM is dropped; names the file
            reader = csv.DictReader(fh)
            missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or [])
            if missing:
                raise UserError(f"{path}: not an Azure LLM trace, missing columns {sorted(missing)}")
            for lineno, row in enumerate(reader, start=2):
                if len(rows) >= limit:
                    break
                try:
                    t = _azure_time_s(row["TIMESTAMP"], f"{path}:{lineno}")
                    rows.append((t, int(row["ContextTokens"]), int(row["GeneratedTokens"]), []))
                except (TypeError, ValueError):
                    raise UserError(f"{path}:{lineno}: ContextTokens / GeneratedTokens must be integers") from None
    else:
        for lineno, row in parse_json_lines(read_text(path, "trace"), path):
            if len(rows) >= limit:
                break
            try:
                raw_hashes = row.get("hash_ids") or []
                check_limit("hash_ids", len(raw_hashes), f"{path}:{lineno}: hash_ids")
                hashes = [int(h) for h in raw_hashes]
                t_s = float(row["timestamp"]) / 1e3
                rows.append((t_s, int(row["input_length"]), int(row["output_length"]), hashes))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                raise UserError(f"{path}:{lineno}: a Mooncake trace line needs timestamp (ms), input_length, "
                                "output_length and optional hash_ids (integers)") from None  # fmt: skip
    if not rows:
        raise UserError(f"{path}: the trace has no lines")
    _check_trace_rows(path, rows)
    t0 = rows[0][0]
    return [(t - t0, i, o, h) for t, i, o, h in rows]


def _check_trace_rows(path: Path, rows: list[tuple[float, int, int, list[int]]]) -> None:
    """Timestamps finite and in order, lengths positive and within the limits, the span within duration_s."""
    previous = None
    for k, (t, n_in, n_out, _) in enumerate(rows, start=1):
        where = f"{path}: trace row {k}"
        if not math.isfinite(t) or t < 0:
            raise UserError(f"{where}: timestamp {t * 1e3:g} ms is not a finite, non-negative time")
        if previous is not None and t < previous:
            raise UserError(f"{where}: timestamp goes back in time ({t * 1e3:g} ms after {previous * 1e3:g} ms); "
                            "a trace must be sorted by arrival")
        if n_in < 0 or n_out < 0:
            raise UserError(f"{where}: input and output lengths must not be negative")
        check_limit("input_tokens", n_in, f"{where}: input length")
        check_limit("output_tokens", n_out, f"{where}: output length")
        previous = t
    check_limit("duration_s", rows[-1][0] - rows[0][0], f"{path}: the trace's span of timestamps (s)")


@PERF_DATASETS.register("trace")
def _trace(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    assert cfg.dataset_path is not None
    pool = token_pool(tok)
    blocks: dict[int, str] = {}

    def block(h: int) -> str:
        if h not in blocks:
            blocks[h] = synthetic_prompt(tok, pool, cfg.trace_block_tokens, random.Random(h))[0]
        return blocks[h]

    out = []
    for i, (t, n_in, n_out, hashes) in enumerate(read_trace(cfg.dataset_path, cfg.trace_format, n)):
        text = " ".join(block(h) for h in hashes)
        words = text.split() if tok is None else []
        if tok is None and words:  # word mode: exactly input_length words, the blocks first
            extra = max(n_in - len(words), 0)
            text = " ".join(words[:n_in] + ([synthetic_prompt(None, pool, extra, rng)[0]] if extra else []))
        elif text and tok is not None:  # tokenizer mode: the blocks cut to input_length tokens
            text = tok.decode(tok.encode(text, add_special_tokens=False).ids[:n_in])
        elif not text:
            text = synthetic_prompt(tok, pool, max(n_in, 1), rng)[0]
        body = request_body(cfg, text, max(n_out, 1))
        out.append(PerfRequest(i, body, cfg.endpoint, count_tokens(tok, text), max(n_out, 1),
                               arrival_ns=round(t * cfg.trace_time_scale * 1e9)))  # fmt: skip
    return out
