"""Build the tiny models' tokenizer locally: a byte-level BPE trained on a built-in corpus.

No hub access: the tokenizer is trained in well under a second from text shipped here, with
the Qwen chat template and the special tokens the Qwen VL / Omni processors look up
(``tokenizer.image_token_id`` and friends). Deterministic: same corpus, same merges.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tokenizer", "training_corpus"]

# Qwen-style ChatML template. Content may be a string or a list of typed parts
# (text / image / video / audio), as in OpenAI and Qwen chat messages.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' or part['type'] == 'image_url' %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif part['type'] == 'video' %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif part['type'] == 'audio' or part['type'] == 'input_audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Named special tokens (attribute name -> token). The Omni processor reads all of these;
# the VL processor reads image_token / video_token.
SPECIAL_TOKENS: dict[str, str] = {
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "audio_token": "<|AUDIO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
_CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_WORDS = (
    "the a an of to in and is it that for on with as was by at be this are from or have not but what all "
    "were when we there can more if will one about up out so said do time them no into just like him then "
    "some could would make than first been its who now people my made over did down only way find use may "
    "water long little very after words called just where most know get through back much before go good "
    "new write our used me man too any day same right look think also around another came come work three "
    "word must because does part even place well such here take why things help put years different away "
    "again off went old number great tell men say small every found still between name should home big give "
    "air line set own under read last never us left end along while might next sound below saw something "
    "thought both few those always looked show large often together asked house world going want school "
    "important until form food keep children feet land side without boy once animal life enough took "
    "sometimes four head above kind began almost live page got earth need far hand high year mother light "
    "country father let night picture being study second soon story since white ever paper hard near "
    "sentence better best across during today however sure knew try told young sun thing whole hear example "
    "heard several change answer room sea against top turned learn point city play toward five himself "
    "usually money seen car morning red green blue yellow black orange purple circle square triangle count "
    "image video audio frame speech music question model token answer color shape how many which is "
    "zero one two three four five six seven eight nine ten cat dog bird fish tree river mountain cloud"
).split()


def training_corpus(n_sentences: int = 4000, seed: int = 0) -> list[str]:
    """A deterministic English-like corpus (word salad over common words, digits, punctuation)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n_sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 16))]
        if rng.random() < 0.2:
            words.append(str(rng.randint(0, 9999)))
        sentence = " ".join(words)
        out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", "?", "!", ","]))
    return out


def build_tokenizer(out_dir: Path, vocab_size: int = 1024) -> Any:
    """Train the byte-level BPE, wrap it as a transformers fast tokenizer, save it to ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = _CONTROL + list(SPECIAL_TOKENS.values())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        extra_special_tokens=dict(SPECIAL_TOKENS),
        model_max_length=32768,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    # Keep the chat template inside tokenizer_config.json too, for tools that read only that.
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.setdefault("chat_template", CHAT_TEMPLATE)
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return fast
