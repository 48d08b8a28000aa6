"""`lmmbench serve` answers ``logprobs`` / ``top_logprobs`` on completions and chat as vLLM does (read by the OpenAI
Python client), and ``reference compare --url`` runs through it, equal to ``--engine transformers``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lmmbench.cli.main import main
from lmmbench.serve import ServerThread


def _client(srv: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=60)


def test_completion_logprobs_read_by_the_openai_client(llm_server: ServerThread) -> None:
    out = _client(llm_server).completions.create(model="tiny-llm", prompt="hello world", max_tokens=4, temperature=0,
                                                 logprobs=3)  # fmt: skip
    lp = out.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None and lp.top_logprobs is not None
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == out.usage.completion_tokens  # type: ignore[union-attr]
    assert "".join(lp.tokens) == out.choices[0].text  # tokens as strings, as vLLM returns them
    for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert chosen <= 0 and 3 <= len(top) <= 4 and top[tok] == chosen  # the chosen token among its step's
        assert max(top.values()) == chosen  # greedy: the chosen token is the most likely one
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]


def test_chat_logprobs_read_by_the_openai_client(llm_server: ServerThread) -> None:
    out = _client(llm_server).chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0, logprobs=True,
        top_logprobs=2)  # fmt: skip
    content = out.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == out.usage.completion_tokens  # type: ignore[union-attr]
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2 and entry.bytes == list(entry.token.encode())
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert math.isclose(entry.top_logprobs[0].logprob, entry.logprob, abs_tol=1e-6)  # greedy: the best
    plain = _client(llm_server).chat.completions.create(model="tiny-llm", messages=[{"role": "user", "content": "hi"}],
                                                        max_tokens=3, temperature=0)  # fmt: skip
    assert plain.choices[0].logprobs is None  # not asked: none, as vLLM


@pytest.mark.parametrize("body, needle", [
    ({"prompt": "hi", "logprobs": 21}, "0 to 20"),
    ({"prompt": "hi", "logprobs": 2, "stream": True}, "stream"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs needs logprobs"),
])  # fmt: skip
def test_logprobs_it_cannot_answer_are_refused(llm_server: ServerThread, body: dict[str, Any], needle: str) -> None:
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    r = httpx.post(llm_server.url + path, json={"model": "tiny-llm", "max_tokens": 2, **body}, timeout=30)
    assert r.status_code == 400 and needle in r.json()["error"]["message"]


def test_reference_compare_through_lmmbench_serve_equals_the_engine(llm_server: ServerThread, tmp_path: Path) -> None:
    prompts = tmp_path / "q.csv"
    prompts.write_text("id,question,A,B\n0,what is two plus two,3,4\n1,name a colour,red,one\n", encoding="utf-8")
    ref = tmp_path / "ref"
    assert main(["reference", "dump", "--model", "tiny-llm", "--prompts", str(prompts), "--max-new-tokens", "4",
                 "--top-k", "5", "--threads", "1", "--out", str(ref)]) == 0  # fmt: skip
    assert main(["reference", "compare", "--url", llm_server.url, "--model", "tiny-llm", "--reference", str(ref),
                 "--out-dir", str(tmp_path / "http")]) == 0  # fmt: skip
    acc = json.loads((tmp_path / "http" / "report.json").read_text())["Accuracy"]
    # the same model in float32 on this CPU, batched by the server: the top-k log-probs agree within 1e-4 (batch
    # composition moves float32 sums in the last digits; a different model would differ by far more than 0.1)
    assert acc["topk_logprob_max_diff"] is not None and acc["topk_logprob_max_diff"] < 1e-4
    assert acc["topk_logprob_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert acc["logprob_diff"]["first_step"]["values_compared"] == 2 * 5  # every top-k token found, as text
    assert acc["logprob_diff"]["per_step"]["first_divergence"] == []
    assert acc["PPL"] is None and "echo" in acc["null_reason"]["PPL"]  # serve does not score prompts (no echo)
