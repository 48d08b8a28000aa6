"""Tokenization of the server's input path: the direct Rust call gives exactly transformers' ids."""

from __future__ import annotations

from typing import Any

import pytest

from lmmbench.engines import GenerationRequest
from lmmbench.engines.inputs import InputPreparer

TEXTS = [
    "Hello",
    "héllo wörld 日本語 🙂 <|im_start|>user\nhi<|im_end|>",
    "  spaces  \n\n tabs\t trailing ",
    "tell me " * 40,
]


@pytest.mark.parametrize("special", [True, False])
def test_direct_encode_matches_transformers_call(tiny_llm: Any, special: bool) -> None:
    preparer = InputPreparer(tiny_llm.tokenizer)
    assert preparer._backend_encode is not None  # the fast path is the one under test
    for text in [*TEXTS, tiny_llm.tokenizer.eos_token]:
        assert preparer.encode(text, special) == list(tiny_llm.tokenizer(text, add_special_tokens=special)["input_ids"])


def test_chat_prompt_ids_match_template_then_tokenizer(tiny_llm: Any) -> None:
    tok = tiny_llm.tokenizer
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": TEXTS[1]}]
    ids = InputPreparer(tok).prepare(GenerationRequest(messages=messages)).input_ids
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ids == list(tok(text, add_special_tokens=False)["input_ids"])


def test_truncating_tokenizer_keeps_the_transformers_call(tiny_llm: Any) -> None:
    tok = tiny_llm.tokenizer
    backend = tok._tokenizer
    backend.enable_truncation(max_length=4)
    try:
        assert InputPreparer(tok)._backend_encode is None
    finally:
        backend.no_truncation()
