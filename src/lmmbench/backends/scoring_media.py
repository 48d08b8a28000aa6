"""Scoring and generation for requests with images or audio, through the model's processor.

A context without the model's media placeholders gets one placeholder per image and per audio clip
in front (``<|vision_bos|><|IMAGE|><|vision_eos|>`` for Qwen VL / omni, from the tokenizer's special
tokens). The continuation tokens are the processor's ids of ``context + continuation`` past those of
``context`` (the processor expands each placeholder to its patch count identically in both).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmmbench.core.errors import UserError

if TYPE_CHECKING:
    from lmmbench.backends.scoring import GenRequest, InProcessScorer, LLRequest

__all__ = ["chat_text", "generate_one", "media_loglikelihood", "prompt_text", "to_messages"]


def _placeholder(tokenizer: Any, kind: str) -> str:
    m = tokenizer.special_tokens_map
    if kind == "image":
        return f"{m.get('vision_bos_token', '')}{m.get('image_token', '<|IMAGE|>')}{m.get('vision_eos_token', '')}"
    return f"{m.get('audio_bos_token', '')}{m.get('audio_token', '<|AUDIO|>')}{m.get('audio_eos_token', '')}"


def _with_placeholders(scorer: InProcessScorer, text: str, images: list[str], audio: list[str]) -> str:
    tok = scorer.tokenizer
    m = tok.special_tokens_map
    prefix = ""
    if images and m.get("image_token", "<|IMAGE|>") not in text:
        prefix += _placeholder(tok, "image") * len(images)
    if audio and m.get("audio_token", "<|AUDIO|>") not in text:
        prefix += _placeholder(tok, "audio") * len(audio)
    return prefix + text


def _load_images(paths: list[str]) -> list[Any]:
    from PIL import Image

    out = []
    for p in paths:
        try:
            with Image.open(p) as im:
                out.append(im.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read image {p}: {exc}") from None
    return out


def _load_audio(paths: list[str], rate: int) -> list[Any]:
    import numpy as np
    import soundfile as sf

    out = []
    for p in paths:
        try:
            data, sr = sf.read(p, dtype="float32", always_2d=True)
        except (OSError, RuntimeError) as exc:
            raise ValueError(f"cannot read audio {p}: {exc}") from None
        mono = data.mean(axis=1)
        if sr != rate:  # linear resampling is enough for evaluation inputs
            n = round(len(mono) * rate / sr)
            mono = np.interp(np.linspace(0, len(mono) - 1, n), np.arange(len(mono)), mono).astype("float32")
        out.append(mono)
    return out


def _process(scorer: InProcessScorer, text: str, images: list[str], audio: list[str]) -> dict[str, Any]:
    proc = scorer.processor
    if proc is None:
        raise UserError(f"model {scorer.model_id} is a text model: it cannot take images or audio")
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if images:
        kwargs["images"] = _load_images(images)
    if audio:
        fe = getattr(proc, "feature_extractor", None)
        if fe is None:
            raise UserError(f"model {scorer.model_id} has no audio input")
        kwargs["audio"] = _load_audio(audio, int(fe.sampling_rate))
        kwargs["padding"] = True
    batch = proc(**kwargs)
    return {k: v.to(scorer.device) if hasattr(v, "to") else v for k, v in batch.items()}


_CTX_LEN_CACHE: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], int] = {}


def media_loglikelihood(scorer: InProcessScorer, req: LLRequest) -> tuple[float, bool]:
    """(LL, is_greedy) of one request with images and/or audio."""
    import torch
    import torch.nn.functional as F

    context, continuation = req.context, req.continuation
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    ctx_text = _with_placeholders(scorer, context, req.images, req.audio)
    cache_key = (scorer.model_id, ctx_text, tuple(req.images), tuple(req.audio))
    ctx_len = _CTX_LEN_CACHE.get(cache_key)
    if ctx_len is None:  # the choices of one question share it: process the media once for it
        ctx_len = int(_process(scorer, ctx_text, req.images, req.audio)["input_ids"].shape[1])
        if len(_CTX_LEN_CACHE) > 256:
            _CTX_LEN_CACHE.clear()
        _CTX_LEN_CACHE[cache_key] = ctx_len
    full = _process(scorer, ctx_text + continuation, req.images, req.audio)
    ids = full["input_ids"][0]
    cont = ids[ctx_len:]
    if len(cont) == 0:
        raise ValueError("empty continuation after tokenisation")
    inputs = dict(full)
    inputs["input_ids"] = full["input_ids"][:, :-1]
    for key in ("attention_mask", "mm_token_type_ids", "token_type_ids"):
        if key in inputs:
            inputs[key] = inputs[key][:, :-1]
    with torch.no_grad():
        logits = scorer.model(**inputs).logits
    logprobs = F.log_softmax(logits, dim=-1)[0]
    inplen = ids.shape[0] - 1
    sel = logprobs[inplen - len(cont) : inplen].unsqueeze(0)
    cont_t = cont.unsqueeze(0)
    greedy = bool((sel.argmax(dim=-1) == cont_t).all())
    ll = torch.gather(sel, 2, cont_t.unsqueeze(-1)).squeeze(-1)
    return float(ll.sum()), greedy


def prompt_text(scorer: InProcessScorer, req: GenRequest) -> str:
    """The prompt string: raw, or wrapped in the chat template (with media placeholders)."""
    if not req.chat:
        return (
            _with_placeholders(scorer, req.prompt, req.images, req.audio) if (req.images or req.audio) else req.prompt
        )
    return chat_text(scorer.tokenizer, scorer.processor, req.prompt, req.system, len(req.images), len(req.audio))


def chat_text(
    tokenizer: Any, processor: Any, user: str, system: str | None, n_images: int = 0, n_audio: int = 0
) -> str:
    """``user`` (and ``system``) in the model's chat template with the generation prompt, as lm-eval's
    ``apply_chat_template``; media placeholders come from the processor's template."""
    if (n_images or n_audio) and processor is not None:
        content: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
        content += [{"type": "audio"} for _ in range(n_audio)]
        content.append({"type": "text", "text": user})
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": [{"type": "text", "text": system}]})
        messages.append({"role": "user", "content": content})
        return str(processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    plain = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    if getattr(tokenizer, "chat_template", None) is None:
        raise UserError("this model's tokenizer has no chat template; set chat_template: false in the task")
    return str(tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True))


def to_messages(req: GenRequest) -> list[dict[str, Any]]:
    """OpenAI-format chat messages of a request (images and audio as data URIs / base64)."""
    import base64
    import mimetypes

    content: list[dict[str, Any]] = []
    for p in req.images:
        mime = mimetypes.guess_type(p)[0] or "image/png"
        try:
            data = base64.b64encode(Path(p).read_bytes()).decode()
        except OSError as exc:
            raise ValueError(f"cannot read image {p}: {exc}") from None
        content.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}})
    for p in req.audio:
        try:
            data = base64.b64encode(Path(p).read_bytes()).decode()
        except OSError as exc:
            raise ValueError(f"cannot read audio {p}: {exc}") from None
        content.append({"type": "input_audio", "input_audio": {"data": data, "format": Path(p).suffix.lstrip(".")}})
    content.append({"type": "text", "text": req.prompt})
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": req.system})
    messages.append({"role": "user", "content": content if len(content) > 1 else req.prompt})
    return messages


def generate_one(scorer: InProcessScorer, req: GenRequest, text: str) -> str:
    """Greedy generation of one media request."""
    import torch

    from lmmbench.backends.scoring import cut_at_stop

    inputs = _process(scorer, text, [str(Path(p)) for p in req.images], req.audio)
    with torch.no_grad():
        gen = scorer.model.generate(**inputs, max_new_tokens=req.max_tokens, do_sample=False)
    new = gen[0, inputs["input_ids"].shape[1] :]
    return cut_at_stop(scorer.tokenizer.decode(new.tolist(), skip_special_tokens=True), req.stop)
