"""Shipped fakes: the OpenAI-compatible test server, a word-level tokenizer, record builders."""

from lmmbench.testing.fixtures import build_word_tokenizer, make_record, running_testserver

__all__ = ["build_word_tokenizer", "make_record", "running_testserver"]
