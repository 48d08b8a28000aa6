"""Helpers for tests and users: run the test server in a subprocess, build a tokenizer, build records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.request_records import RequestRecord
from lmmbench.testing.testserver import WORDS

__all__ = ["build_word_tokenizer", "make_record", "running_testserver", "server_received", "server_stats"]


def _cli_args(cfg: TestServerConfig) -> list[str]:
    args: list[str] = []
    for name, value in cfg.model_dump().items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue  # the option's default
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, dict):
            if value:
                args += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        else:
            args += [flag, str(value)]
    return args


def server_stats(url: str) -> dict[str, Any]:
    """The test server's ``/stats``: requests served and faults injected per kind."""
    with urllib.request.urlopen(url.rstrip("/") + "/stats", timeout=5) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def server_received(url: str) -> list[dict[str, Any]]:
    """The test server's ``/received``: every POST's path, query, headers and body (without the prompt), in order."""
    with urllib.request.urlopen(url.rstrip("/") + "/received", timeout=5) as resp:
        data: list[dict[str, Any]] = json.loads(resp.read())["received"]
        return data


@contextmanager
def running_testserver(cfg: TestServerConfig, timeout_s: float = 20.0) -> Iterator[str]:
    """Start ``lmmbench testserver`` in a subprocess; yields its base URL; stops it afterwards."""
    cmd = [sys.executable, "-m", "lmmbench.cli.main", "testserver", *_cli_args(cfg)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://{cfg.host}:{cfg.port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"test server exited early: {err.strip()[-500:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("test server did not start in time") from None
                time.sleep(0.05)
        yield url
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if proc.stderr:
            proc.stderr.close()


def build_word_tokenizer(directory: str | Path, extra_words: list[str] | None = None, bos: str | None = None) -> Path:
    """A word-level ``tokenizer.json`` (the test server's words, digits, a few hundred more words); with ``bos``,
    that special token put before every encoded text, as Llama's tokenizers do."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    words = ["[UNK]", *WORDS]
    words += [f"w{i}" for i in range(500)]
    words += extra_words or []
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos is not None:
        tok.add_special_tokens([AddedToken(bos, special=True, normalized=False)])
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, bos_id)])  # fmt: skip
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    return out


def make_record(
    *,
    request_id: int = 0,
    scheduled_ms: float = 0.0,
    sent_ms: float | None = None,
    ttft_ms: float = 20.0,
    chunk_gaps_ms: list[float] | None = None,
    chunk_tokens: list[int] | None = None,
    error_kind: str = "",
    input_tokens: int | None = 10,
    warmup: bool = False,
) -> RequestRecord:
    """A finished record with the given timeline (milliseconds from the scheduled time)."""
    ms = 1_000_000
    base = 10_000 * ms + int(scheduled_ms * ms)
    sent = base + int((sent_ms if sent_ms is not None else 0.0) * ms)
    gaps = chunk_gaps_ms if chunk_gaps_ms is not None else [5.0] * 3
    tokens = chunk_tokens if chunk_tokens is not None else [1] * (len(gaps) + 1)
    times = [base + int(ttft_ms * ms)]
    for g in gaps:
        times.append(times[-1] + int(g * ms))
    rec = RequestRecord(request_id=request_id, scheduled_ns=base, slot_ns=base, sent_ns=sent, warmup=warmup)
    rec.first_byte_ns = sent + ms // 10
    if error_kind:
        rec.error_kind, rec.error_message, rec.end_ns = error_kind, "injected", times[0]
        return rec
    rec.status = 200
    rec.first_token_ns = rec.first_content_ns = times[0]
    rec.chunk_times_ns, rec.chunk_tokens = times, tokens
    rec.output_tokens = sum(tokens)
    rec.input_tokens = input_tokens
    rec.end_ns = times[-1]
    rec.token_source = "usage"
    return rec
