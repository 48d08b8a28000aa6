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

__all__ = ["chat_text", "gen_messages", "generate_one", "media_loglikelihood", "prompt_text", "to_messages"]


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
        from lmmbench.media.extract import load_image

        kwargs["images"] = [load_image(Path(p)) for p in images]
    if audio:
        fe = getattr(proc, "feature_extractor", None)
        if fe is None:
            raise UserError(f"model {scorer.model_id} has no audio input")
        kwargs["audio"] = _load_audio(audio, int(fe.sampling_rate))
        kwargs["padding"] = True
    batch = proc(**kwargs)
    from lmmbench.models.media_check import require_media_tokens

    # a medium the processor ignored fails the sample (MediaNotReachedError) instead of scoring text alone
    require_media_tokens(batch, scorer.tokenizer, proc, {"image": bool(images), "audio": bool(audio)})
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
    return chat_text(scorer.tokenizer, scorer.processor, gen_messages(req), len(req.images), len(req.audio))


def gen_messages(req: GenRequest) -> list[dict[str, str]]:
    """The text chat messages of a request: its own, or one user turn with the prompt."""
    return [dict(m) for m in req.messages] if req.messages else [{"role": "user", "content": req.prompt}]


def _last_user(messages: list[dict[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "user":
            return i
    raise ValueError("chat messages without a user turn")


def chat_text(
    tokenizer: Any, processor: Any, messages: list[dict[str, str]], n_images: int = 0, n_audio: int = 0
) -> str:
    """Messages in the model's chat template with the generation prompt (lm-eval's ``apply_chat_template``);
    with media, the processor's template puts the placeholders in the last user turn."""
    if (n_images or n_audio) and processor is not None:
        parts: list[dict[str, Any]] = [
            {"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in messages
        ]
        media = [{"type": "image"} for _ in range(n_images)] + [{"type": "audio"} for _ in range(n_audio)]
        last = _last_user(parts)
        parts[last]["content"] = media + parts[last]["content"]
        return str(processor.apply_chat_template(parts, tokenize=False, add_generation_prompt=True))
    if getattr(tokenizer, "chat_template", None) is None:
        raise UserError("this model's tokenizer has no chat template; set chat_template: false in the task")
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def to_messages(req: GenRequest) -> list[dict[str, Any]]:
    """OpenAI-format chat messages of a request; images (data URIs) and audio (base64) in the last user turn."""
    import base64
    import mimetypes

    messages: list[dict[str, Any]] = list(gen_messages(req))
    if not req.images and not req.audio:
        return messages
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
    last = _last_user(messages)
    if req.layout is not None:  # interleaved text and media
        parts = [content[x] if isinstance(x, int) else {"type": "text", "text": x} for x in req.layout]
        messages[last] = {"role": "user", "content": parts}
        return messages
    messages[last] = {"role": "user", "content": [*content, {"type": "text", "text": messages[last]["content"]}]}
    return messages


def generate_one(scorer: InProcessScorer, req: GenRequest, text: str) -> str:
    """Generation of one media request: greedy, or sampled with the request's settings (lm-eval's do_sample)."""
    import torch

    from lmmbench.backends.stop_strings import cut_at_stop

    inputs = _process(scorer, text, [str(Path(p)) for p in req.images], req.audio)
    with torch.no_grad():
        sampling: dict[str, Any] = {"do_sample": req.temperature > 0}
        if req.temperature > 0:
            sampling.update(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k)
        gen = scorer.model.generate(**inputs, max_new_tokens=req.max_tokens, **sampling)
    new = gen[0, inputs["input_ids"].shape[1] :]
    return cut_at_stop(scorer.tokenizer.decode(new.tolist(), skip_special_tokens=True), req.stop)
