"""What SGLang 0.5.23's ``bench_serving`` data sets draw from: its ``DatasetRow``, its tokenizer calls and its
random helpers (``sglang/benchmark/datasets/common.py``), on lmmbench's tokenizer and seeded generators.

SGLang seeds Python's and numpy's global generators with ``--seed`` before it draws (``random.seed``,
``np.random.seed``); ``VllmRng`` holds the same two streams. The tokenizer is a ``tokenizers.Tokenizer`` read as a
Hugging Face fast tokenizer reads it: ``encode`` adds the special tokens (``tokenizer.encode(text)``), the chat
template is the one in the tokenizer folder, found and rendered as ``apply_chat_template`` does
(``datasets.chat_templates``: transformers' lookup order, jinja2's immutable sandbox).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lmmbench.datasets.chat_templates import find_chat_template, read_json_object
from lmmbench.datasets.vllm.samplers import VllmRng, VllmTokenizer

__all__ = ["SglRow", "SglTokenizer", "VllmRng", "compute_random_lens", "gen_mm_prompt", "gen_prompt",
           "gen_prompt_ids"]  # fmt: skip


@dataclass
class SglRow:
    """One drawn request, SGLang's ``DatasetRow``: a text, token ids, OpenAI messages, or (multi-turn) a list of
    rounds; ``prompt_len`` None where SGLang's count is not the prompt's (the server's usage counts it then)."""

    prompt: Any
    prompt_len: int | None
    output_len: int
    image_data: list[str] | None = None
    timestamp_s: float | None = None  # send time from the start of the run (mooncake)
    extra_body: dict[str, Any] = field(default_factory=dict)  # per-request fields, over --extra-request-body
    rounds: bool = False  # multi-turn: prompt is a list of rounds, each sent after the server's previous reply
    labels: dict[str, Any] = field(default_factory=dict)


class SglTokenizer:
    """The Hugging Face tokenizer calls SGLang's data sets make, on a ``tokenizers.Tokenizer``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.vt = VllmTokenizer.load(path)
        folder = path if path.is_dir() else path.parent
        self.config: dict[str, Any] = read_json_object(folder / "tokenizer_config.json")
        self.template = find_chat_template(folder, self.config)

    @property
    def bos_token(self) -> str | None:
        """``tokenizer.bos_token``: the one ``tokenizer_config.json`` names (None without one)."""
        return self.specials.get("bos_token")

    @cached_property
    def specials(self) -> dict[str, str]:
        """The named special tokens of ``tokenizer_config.json`` (``bos_token``, ``eos_token``, ...; an older
        folder's ``special_tokens_map.json`` under them), which transformers hands to the chat template (a token
        saved as an ``AddedToken`` dict: its content)."""
        folder = self.path if self.path.is_dir() else self.path.parent
        mapped = folder / "special_tokens_map.json"
        named: dict[str, Any] = read_json_object(mapped)
        out = {}
        for key, value in {**named, **self.config}.items():
            if isinstance(value, dict):
                value = value.get("content")
            if key.endswith("_token") and isinstance(value, str):
                out[key] = value
        return out

    @property
    def vocab_size(self) -> int:
        """The vocabulary without added tokens (``tokenizer.vocab_size``)."""
        return self.vt.vocab_size

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """``tokenizer.encode(text)``: the special tokens added, as transformers adds them by default."""
        return self.vt.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids: list[int]) -> str:
        """``tokenizer.decode(ids)`` (special tokens kept)."""
        return self.vt.decode(ids)

    def num_special_tokens_to_add(self) -> int:
        """Tokens ``encode`` adds to one text."""
        return self.vt.num_special

    @cached_property
    def sorted_vocab(self) -> list[int]:
        """``get_available_tokens``: every id of ``get_vocab()`` (added tokens too), sorted."""
        return sorted(set(self.vt.tok.get_vocab(with_added_tokens=True).values()))

    @cached_property
    def special_ids(self) -> set[int]:
        """``all_special_ids``: the special added tokens."""
        return set(self.vt.special_ids)

    def token_id(self, token: str) -> int | None:
        """The id of ``token`` (None when the vocabulary lacks it)."""
        found = self.vt.tok.token_to_id(token)
        return int(found) if found is not None else None

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> str | None:
        """``apply_chat_template(messages, add_generation_prompt=True, tokenize=False)``; None without a template
        (transformers raises then, and SGLang takes its fallback)."""
        if self.template is None:
            return None
        import jinja2

        try:  # in jinja2's sandbox, as transformers renders it; a sandbox refusal is a UserError naming the file
            return self.template.render(messages=messages, add_generation_prompt=True, **self.specials)
        except jinja2.TemplateError:
            return None

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int] | None:
        """``apply_chat_template(..., tokenize=True)``: the rendered text, encoded without added special tokens."""
        text = self.apply_chat_template(messages)
        return None if text is None else self.encode(text, add_special_tokens=False)


def compute_random_lens(rngs: VllmRng, full_len: int, range_ratio: float, num: int) -> list[int]:
    """SGLang's ``compute_random_lens``: uniform integers in [max(int(full * ratio), 1), full] (numpy's global
    generator); all 0 for a length of 0 or less."""
    if full_len <= 0:
        return [0] * num
    return [int(x) for x in rngs.np.randint(max(int(full_len * range_ratio), 1), full_len + 1, size=num)]


def gen_prompt_ids(rngs: VllmRng, tok: SglTokenizer, n: int) -> list[int]:
    """``gen_prompt_ids``: ``n`` ids drawn with replacement from the sorted vocabulary (Python's generator)."""
    return rngs.py.choices(tok.sorted_vocab, k=n)


def gen_prompt(rngs: VllmRng, tok: SglTokenizer, n: int) -> str:
    """``gen_prompt``: the decoded text of ``gen_prompt_ids``."""
    return tok.decode(gen_prompt_ids(rngs, tok, n))


def gen_mm_prompt(rngs: VllmRng, tok: SglTokenizer, image_pad_id: int | None, n: int) -> str:
    """``gen_mm_prompt``: ``n`` ids from the vocabulary without the special ids and the image pad id, decoded."""
    excluded = set(tok.special_ids) | ({image_pad_id} if image_pad_id is not None else set())
    pool = [i for i in tok.sorted_vocab if i not in excluded]
    return tok.decode(rngs.py.choices(pool, k=n))
