"""The tokenizer of a shape-only model: the built-in BPE, padded so its special-token ids are the real ones.

A shape's config names real token ids (Qwen2.5: ``<|im_start|>`` = 151644, ``<|IMAGE|>`` = 151655, ...).
The built-in byte-level BPE has about a thousand entries, so the vocabulary is padded with unreachable
filler entries up to the first special id, then the special tokens are added in id order; every id is
checked against the config's after the build. Text tokenizes into the low ids, as with the tiny models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmmbench.models.tokenizer_build import CHAT_TEMPLATE, training_corpus

__all__ = ["LLAMA3_TEMPLATE", "build_shape_tokenizer", "chat_template_for"]

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
# Qwen2.5-VL (and text Qwen2.5) spell the vision tokens differently from Qwen2.5-Omni.
_VL_NAMES = {"<|vision_bos|>": "<|vision_start|>", "<|vision_eos|>": "<|vision_end|>",
             "<|IMAGE|>": "<|image_pad|>", "<|VIDEO|>": "<|video_pad|>"}
_BASE_VOCAB = 1024


def chat_template_for(kind: str, specials: dict[int, str]) -> str:
    """The chat template of a shape: ``llama3``, or ChatML with the vision tokens the vocabulary has."""
    if kind == "llama3":
        return LLAMA3_TEMPLATE
    names = set(specials.values())
    template = CHAT_TEMPLATE
    if "<|IMAGE|>" not in names:
        for omni_name, vl_name in _VL_NAMES.items():
            template = template.replace(omni_name, vl_name)
    return template


def _base_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=_BASE_VOCAB, special_tokens=[], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    return dict(model["vocab"]), [(a, b) for a, b in merges]


def build_shape_tokenizer(out_dir: Path, specials: dict[int, str], named: dict[str, str], eos: str, pad: str,
                          template: str, bos: str | None = None) -> Any:
    """Build, check and save the tokenizer: ``specials`` (id -> token) land on exactly those ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab, merges = _base_vocab_and_merges()
    ids = sorted(specials)
    if ids != list(range(ids[0], ids[0] + len(ids))):
        raise ValueError(f"special token ids must be contiguous, got {ids[0]}..{ids[-1]} with gaps")
    for i in range(len(vocab), ids[0]):
        vocab[f"<|lmmbench_unused_{i}|>"] = i  # never produced: no merge leads to it
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(specials[i], special=True, normalized=False) for i in ids])
    wrong = {t: tok.token_to_id(t) for i, t in specials.items() if tok.token_to_id(t) != i}
    if wrong:
        raise ValueError(f"special tokens landed on the wrong ids: {wrong}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token=pad, bos_token=bos,
        extra_special_tokens=dict(named), model_max_length=32768, padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = template
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.setdefault("chat_template", template)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return fast
