"""A small byte-level BPE tokenizer, trained from a fixed text, for checking vLLM's request samplers.

Unlike a word-level one, its decoded random ids re-encode to other lengths (merges), so the samplers' pad-or-cut
loop runs; it has two special tokens (``<s>``, ``</s>``) and adds ``<s>`` to every encoding, as many chat
models' tokenizers do. Training is deterministic: the same ``tokenizer.json`` on every machine.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["build_sampler_tokenizer"]

_TEXT = ("the quick brown fox jumps over the lazy dog while seven wizards quietly hex a jovial bank clerk; "
         "pack my box with five dozen liquor jugs, then sphinx of black quartz judge my vow. ")


def build_sampler_tokenizer(directory: str | Path) -> Path:
    """Write ``tokenizer.json`` (and a ``tokenizer_config.json``) into ``directory``; returns it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator([_TEXT * 4, _TEXT.upper(), _TEXT.replace(" ", "")], trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        '{"bos_token": "<s>", "eos_token": "</s>", "clean_up_tokenization_spaces": false, '
        '"tokenizer_class": "PreTrainedTokenizerFast"}\n', encoding="utf-8")
    return out
