"""The test server's answer key (``lmmbench testserver --answers FILE``): streamed answers that are correct for the
prompts the file knows, but only while at most ``--correct-below-inflight N`` requests are in flight (a server that
degrades under load, for tests of quality under load); every other answer is the server's usual filler words.

``FILE`` is a JSON object mapping a piece of prompt text (a question) to its answer; the longest piece found in a
prompt wins. ``GET /received_full`` returns the POSTs the server received with their prompts (``/received`` leaves
them out), for tests that compare request bodies whole.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from lmmbench.testing.request_log import RequestLog

__all__ = ["answer_words", "full_received"]


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the answer key must be a JSON object {{prompt text: answer}}")
    pairs = [(str(k), tuple(str(v).split())) for k, v in data.items() if str(v).split()]
    return tuple(sorted(pairs, key=lambda kv: -len(kv[0])))


def answer_words(answers: Path | None, below_inflight: int, prompt: str, in_flight: int) -> list[str] | None:
    """The words of the correct answer to ``prompt`` while ``in_flight`` (this request included) is at most
    ``below_inflight`` (0: any load); None for the filler answer."""
    if answers is None or (below_inflight and in_flight > below_inflight):
        return None
    for key, words in _load(str(answers)):
        if key in prompt:
            return list(words)
    return None


def full_received(log: RequestLog) -> dict[str, Any]:
    """``GET /received_full``: every logged POST's path and whole JSON body (prompt included), in order."""
    out = []
    for target, _head, body in log.raw:
        try:
            parsed: Any = json.loads(body) if body else None
        except (ValueError, RecursionError):
            parsed = None
        out.append({"path": target.partition("?")[0], "body": parsed})
    return {"received": out, "dropped": log.dropped}
