"""`eval --mode perf` on a log-likelihood task against a real server that echoes prompt log-probs (a real tiny model
behind aiohttp on 127.0.0.1): the load test sends eval's own echo + logprobs completions, unstreamed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

from lmmbench.cli.main import main

from .logprob_server import make_app, serve_app


def _canon(body: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in body.items() if k != "stream"}, sort_keys=True)


def test_eval_mode_perf_sends_evals_loglikelihood_requests(tiny_llm: Any, port: int, tmp_path: Path) -> None:
    app = make_app(tiny_llm, "tiny-llm")
    seen: list[tuple[str, dict[str, Any]]] = []

    @web.middleware
    async def log(request: web.Request, handler: Any) -> Any:
        if request.method == "POST":
            seen.append((request.path, await request.json()))
        return await handler(request)

    app.middlewares.append(log)
    args = ["--tasks", "sample_mc", "--limit", "3", "--tokenizer", "tiny-llm"]
    with serve_app(app, port) as url:
        assert main(["eval", "--model", url, *args, "--out-dir", str(tmp_path / "eval")]) == 0
        n = len(seen)
        assert main(["eval", "--mode", "perf", "--model", url, *args, "--out-dir", str(tmp_path / "perf")]) == 0
    by_eval = Counter(_canon(b) for _p, b in seen[:n])
    assert n == 12 and all(json.loads(k)["echo"] for k in by_eval)  # 3 questions x 4 choices
    perf = [b for p, b in seen[n:] if p == "/v1/completions"]
    loaded = [b for b in perf if b.get("stream") is False]  # the load: sent whole, as eval sends them
    assert Counter(_canon(b) for b in loaded) == by_eval
    probes = [b for b in perf if "stream" not in b]  # the one probe before the load: the first request itself
    assert len(probes) == 1 and _canon(probes[0]) in by_eval
    preds = next((tmp_path / "perf" / "perf").glob("*/predictions/sample_mc.jsonl")).read_text().splitlines()
    assert len(preds) == 12 and all(json.loads(x)["error"] is None for x in preds)
