"""Turn a ``GenerationRequest`` into model input: chat template, data-URI images, base64 audio.

Images come only as ``data:`` URIs and audio only as inline base64 (OpenAI ``input_audio``): this
module never fetches a URL, never opens a local path named by a request and never evaluates a
request field. Anything malformed raises ``InputError`` with a message fit for an HTTP 400.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Any

from lmmbench.core.clock import now_ns, ns_to_ms
from lmmbench.engines.requests import GenerationRequest, PreparedInput

__all__ = ["InputError", "InputPreparer", "decode_audio", "decode_image_data_uri"]

MAX_IMAGE_PIXELS = 4096 * 4096


class InputError(ValueError):
    """A request's content cannot be turned into model input (the client's fault)."""


def _b64(data: str, what: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{what}: not valid base64") from None


def decode_image_data_uri(url: str) -> Any:
    """A PIL RGB image from ``data:image/<type>;base64,<data>``; other URLs are refused."""
    from PIL import Image

    if not url.startswith("data:"):
        raise InputError("image_url: only data: URIs are accepted (the server never fetches URLs)")
    header, sep, payload = url.partition(",")
    if not sep or ";base64" not in header:
        raise InputError("image_url: expected data:image/<type>;base64,<data>")
    raw = _b64(payload, "image_url")
    try:
        img = Image.open(io.BytesIO(raw))
        if img.width * img.height > MAX_IMAGE_PIXELS:
            raise InputError(f"image_url: image of {img.width}x{img.height} pixels is too large")
        return img.convert("RGB")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"image_url: not a readable image ({type(exc).__name__})") from None


def decode_audio(data: str, fmt: str, sampling_rate: int) -> Any:
    """Mono float32 samples at ``sampling_rate`` from base64 audio (wav, flac, ogg)."""
    import numpy as np
    import soundfile as sf

    raw = _b64(data, "input_audio.data")
    try:
        samples, rate = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    except Exception as exc:
        raise InputError(f"input_audio: cannot decode {fmt or 'audio'} ({type(exc).__name__})") from None
    if len(samples) == 0:
        raise InputError("input_audio: the audio has no samples")
    mono = samples.mean(axis=1)
    if rate != sampling_rate and len(mono) > 1:
        n_out = max(1, round(len(mono) * sampling_rate / rate))
        x_old = np.linspace(0.0, 1.0, num=len(mono))
        x_new = np.linspace(0.0, 1.0, num=n_out)
        mono = np.interp(x_new, x_old, mono).astype(np.float32)
    return mono


def _plain_backend_encode(tokenizer: Any) -> Any:
    """The Rust ``encode`` of ``tokenizer`` when transformers adds nothing to it, else ``None``."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or not hasattr(backend, "encode") or getattr(tokenizer, "split_special_tokens", False):
        return None
    if getattr(backend, "truncation", None) is not None or getattr(backend, "padding", None) is not None:
        return None
    return backend.encode


class InputPreparer:
    """Builds ``PreparedInput`` for one loaded model (text, VL or omni)."""

    def __init__(self, tokenizer: Any, processor: Any = None, has_audio: bool = False) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        self.has_audio = has_audio
        self._backend_encode = _plain_backend_encode(tokenizer)

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        """Token ids of ``text``, as ``tokenizer(text)["input_ids"]`` gives them.

        A plain fast tokenizer (no truncation, padding or split special tokens) is called in Rust
        directly: the transformers wrapper goes through ``encode_batch``, which releases the GIL and
        then waits for it behind the engine thread, several times the cost of the encoding itself.
        """
        if self._backend_encode is not None:
            return list(self._backend_encode(text, add_special_tokens=add_special_tokens).ids)
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])

    def _flatten_text(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for i, msg in enumerate(messages):
            content = msg.get("content")
            if isinstance(content, list):
                texts = []
                for part in content:
                    kind = part.get("type") if isinstance(part, dict) else None
                    if kind == "text":
                        texts.append(str(part.get("text", "")))
                    else:
                        raise InputError(f"messages[{i}]: content part '{kind}' needs a multimodal model")
                content = "".join(texts)
            out.append({"role": msg.get("role", "user"), "content": content or ""})
        return out

    def _multimodal(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any], list[Any]]:
        images: list[Any] = []
        audios: list[Any] = []
        out = []
        for i, msg in enumerate(messages):
            content = msg.get("content")
            if not isinstance(content, list):
                out.append({"role": msg.get("role", "user"), "content": [{"type": "text", "text": content or ""}]})
                continue
            parts: list[dict[str, Any]] = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    parts.append({"type": "text", "text": str(part.get("text", ""))})
                elif kind == "image_url":
                    ref = part.get("image_url")
                    url = ref.get("url") if isinstance(ref, dict) else ref
                    if not isinstance(url, str):
                        raise InputError(f"messages[{i}]: image_url needs a url")
                    images.append(decode_image_data_uri(url))
                    parts.append({"type": "image"})
                elif kind == "input_audio":
                    if not self.has_audio:
                        raise InputError(f"messages[{i}]: this model does not accept audio")
                    audio = part.get("input_audio") or {}
                    if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
                        raise InputError(f"messages[{i}]: input_audio needs base64 'data'")
                    rate = int(getattr(self.processor.feature_extractor, "sampling_rate", 16000))
                    audios.append(decode_audio(audio["data"], str(audio.get("format", "")), rate))
                    parts.append({"type": "audio"})
                else:
                    raise InputError(f"messages[{i}]: unsupported content part type '{kind}'")
            out.append({"role": msg.get("role", "user"), "content": parts})
        return out, images, audios

    def _check_media(self, enc: Any, images: bool, audio: bool) -> None:
        """An image or audio clip that yields no tokens for the model is an error, not a text-only answer."""
        from lmmbench.models.media_check import MediaNotReachedError, require_media_tokens

        try:
            require_media_tokens(enc, self.tokenizer, self.processor, {"image": images, "audio": audio})
        except MediaNotReachedError as exc:
            raise InputError(f"messages: {exc}") from None

    def prepare(self, request: GenerationRequest) -> PreparedInput:
        """Token ids and extra tensors of ``request``; ``InputError`` if it is malformed."""
        start = now_ns()
        kwargs: dict[str, Any] = {}
        if request.prompt_token_ids is not None:
            ids = [int(t) for t in request.prompt_token_ids]
        elif request.prompt is not None:
            ids = self.encode(request.prompt, add_special_tokens=True)
        else:
            messages = request.messages or []
            if not messages:
                raise InputError("messages: at least one message is required")
            if self.processor is None:
                chat = self._flatten_text(messages)
                text = self.tokenizer.apply_chat_template(
                    chat, add_generation_prompt=request.add_generation_prompt, tokenize=False
                )
                ids = self.encode(text, add_special_tokens=False)
            else:
                chat, images, audios = self._multimodal(messages)
                text = self.processor.apply_chat_template(
                    chat, add_generation_prompt=request.add_generation_prompt, tokenize=False
                )
                call: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
                if images:
                    call["images"] = images
                if audios:
                    call["audio"] = audios
                try:
                    enc = self.processor(**call)
                except Exception as exc:
                    raise InputError(f"messages: the processor rejected the input ({exc})") from None
                self._check_media(enc, bool(images), bool(audios))
                ids = enc["input_ids"][0].tolist()
                kwargs = {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask")}
        if not ids:
            raise InputError("prompt: it is empty after tokenization")
        return PreparedInput(input_ids=ids, model_kwargs=kwargs, preprocess_ms=ns_to_ms(now_ns() - start))
