"""What SGLang 0.5.23's ``bench_serving`` data sets draw from: its ``DatasetRow``, its tokenizer calls and its
random helpers (``sglang/benchmark/datasets/common.py``), on lmmbench's tokenizer and seeded generators.

SGLang seeds Python's and numpy's global generators with ``--seed`` before it draws (``random.seed``,
``np.random.seed``); ``VllmRng`` holds the same two streams. The tokenizer is a ``tokenizers.Tokenizer`` read as a
Hugging Face fast tokenizer reads it: ``encode`` adds the special tokens (``tokenizer.encode(text)``), the chat
template is the one in the tokenizer folder (``tokenizer_config.json``, ``chat_template.jinja`` or
``chat_template.json``), rendered with jinja2 as ``apply_chat_template`` renders it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.datasets.vllm_samplers import VllmRng, VllmTokenizer

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
        config_file = folder / "tokenizer_config.json"
        self.config: dict[str, Any] = (json.loads(config_file.read_text(encoding="utf-8"))
                                       if config_file.is_file() else {})  # fmt: skip
        self.template = _find_template(folder, self.config)

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
        named: dict[str, Any] = json.loads(mapped.read_text(encoding="utf-8")) if mapped.is_file() else {}
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
        try:
            import jinja2
        except ImportError:
            raise UserError("applying a chat template needs jinja2: pip install jinja2") from None
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])  # as transformers renders it
        env.globals["raise_exception"] = _raise
        env.filters["tojson"] = _tojson
        try:
            return str(env.from_string(self.template).render(messages=messages, add_generation_prompt=True,
                                                            **self.specials))  # fmt: skip
        except jinja2.TemplateError:
            return None

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int] | None:
        """``apply_chat_template(..., tokenize=True)``: the rendered text, encoded without added special tokens."""
        text = self.apply_chat_template(messages)
        return None if text is None else self.encode(text, add_special_tokens=False)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    """transformers' ``tojson`` filter of chat templates (plain ``json.dumps``, no HTML escaping)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    import jinja2

    raise jinja2.TemplateError(message)


def _find_template(folder: Path, config: dict[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if isinstance(template, str) and template:
        return template
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if (folder / "chat_template.json").is_file():
        found = json.loads((folder / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
        return found if isinstance(found, str) and found else None
    return None


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
