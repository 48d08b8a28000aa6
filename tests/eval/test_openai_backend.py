"""The OpenAI-endpoint backend against a real HTTP server on 127.0.0.1 serving a real tiny model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from float_tolerance import f32_close, worst_f32_gap
from lmmbench.backends.scoring import GenRequest, InProcessScorer, LLRequest
from lmmbench.backends.scoring_openai import OpenAIScorer
from lmmbench.core.errors import UserError
from lmmbench.evaluation import EvalConfig, run_eval

from .logprob_server import serve

REQS = [
    LLRequest("Question: what is 2+2?\nAnswer:", " four"),
    LLRequest("Question: what is 2+2?\nAnswer:", " 4"),
    LLRequest("The sky is ", "blue and wide"),
]


def test_endpoint_loglikelihoods_equal_in_process(tiny_llm: Any, port: int) -> None:
    local = InProcessScorer(tiny_llm, batch_size=1).loglikelihood(REQS)
    with serve(tiny_llm, port) as url:
        remote = OpenAIScorer(url, "tiny-llm", tiny_llm.tokenizer, max_length=2048).loglikelihood(REQS)
        scorer = OpenAIScorer(url, "tiny-llm", tiny_llm.tokenizer, max_length=2048)
        rolling = scorer.loglikelihood_rolling(["one two three four"])
    # the server's forward covers one more token (another matrix shape) and its batch is its own: float32's spread,
    # factor 1 (measured on an AVX2 EPYC: 0.068 of it, the rolling one 0.084)
    gap = worst_f32_gap([a for a, _ in local], [b for b, _ in remote])
    assert gap <= 1.0, f"{gap:.3f} x F32_SPREAD_REL apart"
    assert [g for _, g in local] == [g for _, g in remote]  # argmaxes: flip only on a tie within the spread
    whole = InProcessScorer(tiny_llm).loglikelihood_rolling(["one two three four"])[0]
    assert f32_close(rolling[0], whole, factor=1.0), (rolling[0], whole)


def test_endpoint_generation_equals_in_process_greedy(tiny_llm: Any, port: int) -> None:
    reqs = [GenRequest("Q: What colour is snow?\nA:", max_tokens=5, stop=["\n"])]
    local = InProcessScorer(tiny_llm, batch_size=1).generate(reqs)
    with serve(tiny_llm, port) as url:
        remote = OpenAIScorer(url, "tiny-llm", tiny_llm.tokenizer).generate(reqs)
    assert remote == local


def test_server_without_prompt_logprobs_gets_a_clear_error(tiny_llm: Any, port: int) -> None:
    with serve(tiny_llm, port, logprobs_supported=False) as url:
        scorer = OpenAIScorer(url, "tiny-llm", tiny_llm.tokenizer)
        with pytest.raises(UserError, match="does not return prompt log-probs"):
            scorer.loglikelihood(REQS[:1])


def test_server_refusing_logprobs_gets_the_same_clear_error(tiny_llm: Any, port: int) -> None:
    with (
        serve(tiny_llm, port, refuse_logprobs=True) as url,
        pytest.raises(UserError, match=r"does not return prompt log-probs.*HTTP 400"),
    ):
        OpenAIScorer(url, "tiny-llm", tiny_llm.tokenizer).loglikelihood(REQS[:1])


def test_unreachable_server_is_a_user_error(tiny_llm: Any, port: int) -> None:
    with pytest.raises(UserError, match="cannot reach"):
        OpenAIScorer(f"http://127.0.0.1:{port}", "m", tiny_llm.tokenizer).loglikelihood(REQS[:1])


def test_eval_against_an_endpoint_matches_in_process(tiny_llm: Any, port: int, tmp_path: Path) -> None:
    common: dict[str, Any] = {"tasks": ["sample_mc"], "limit": 5, "threads": 1}
    local = run_eval(EvalConfig.model_validate({**common, "model": "tiny-llm", "out_dir": tmp_path / "a"}), False)
    with serve(tiny_llm, port) as url:
        remote = run_eval(
            EvalConfig.model_validate(
                {**common, "model": url, "tokenizer": "tiny-llm", "max_length": 32768, "out_dir": tmp_path / "b"}
            ),
            False,
        )
    a, b = local.results[0]["metrics"], remote.results[0]["metrics"]
    assert a["acc"]["value"] == b["acc"]["value"] and a["acc_norm"]["value"] == b["acc_norm"]["value"]
    assert remote.results[0]["model"].startswith("tiny-llm@http://127.0.0.1")


def test_endpoint_context_length_comes_from_the_server_or_max_length(tiny_llm: Any, port: int,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    """No silent 2048: max_model_len from /v1/models when the server says it, else --max-length is
    required for rolling perplexity (and named in the error)."""
    from lmmbench.evaluation.modes import make_backend

    common = {"tasks": ["sample_ppl"], "tokenizer": "tiny-llm", "limit": 2, "out_dir": tmp_path}
    with serve(tiny_llm, port) as url:
        with pytest.raises(UserError, match="--max-length"):
            run_eval(EvalConfig.model_validate({**common, "model": url}), False)
        assert make_backend(EvalConfig.model_validate({**common, "model": url, "max_length": 48})).max_length == 48
    with serve(tiny_llm, port, max_model_len=64) as url:
        backend = make_backend(EvalConfig.model_validate({**common, "model": url}))
        assert backend.max_length == 64
