"""The image data sets of SGLang 0.5.23's ``bench_serving``: ``image`` (random or blank images of
``--image-resolution`` in ``--image-format``, ``--image-count`` per request or 1..count with
``--random-image-count``, random text of ``--random-input-len`` tokens) and ``mmmu`` (MMMU's Math test split from
the Hugging Face ``datasets`` cache), drawn as SGLang's ``image.py`` and ``mmmu.py`` draw them.

A request's text is SGLang's: on a chat backend the raw text (the images go before it as ``image_url`` parts); on
SGLang's native API the model's chat template rendered over the image items and the text (SGLang's fallback
``<image>`` + text when there is none), with the images in ``image_data``. SGLang counts each prompt with the
model's processor (text and vision tokens); lmmbench leaves that count to the server's usage
(docs/perf.md, "Coming from SGLang").
"""

from __future__ import annotations

import argparse
import base64
import io
import json
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError
from lmmbench.datasets.sglang.rows import SglRow, SglTokenizer, VllmRng, compute_random_lens, gen_mm_prompt

__all__ = ["IMAGE_BACKENDS", "MMMU_REPO", "image_rows", "mmmu_rows", "parse_resolution"]

#: the backends SGLang's image rows go to (``create_mm_data_row``); the chat ones get the raw text
IMAGE_BACKENDS = ("sglang", "sglang-native", "sglang-oai-chat", "vllm-chat", "lmdeploy-chat")
_RAW_TEXT = ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat")
MMMU_REPO, MMMU_SUBSET = "MMMU/MMMU", "Math"
_PRESETS = {"4k": (3840, 2160), "1080p": (1920, 1080), "720p": (1280, 720), "360p": (640, 360)}


def _size(text: str) -> tuple[int, int]:
    """``parse_image_resolution``: (width, height) of a preset or of ``HEIGHTxWIDTH``."""
    if text in _PRESETS:
        return _PRESETS[text]
    parts = text.strip().lower().split("x")
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[0]) > 0 and int(parts[1]) > 0:
        for side in parts:
            check_limit("image_side", int(side), f"--image-resolution {text}: a side of")
        return int(parts[1]), int(parts[0])
    raise UserError(f"--image-resolution {text}: use 4k, 1080p, 720p, 360p, HEIGHTxWIDTH (1080x1920) or "
                    "random:MINHxMINW-MAXHxMAXW")  # fmt: skip


def parse_resolution(text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(min (width, height), max (width, height)) of ``--image-resolution``: equal unless ``random:...``."""
    if not text.strip().lower().startswith("random:"):
        size = _size(text)
        return size, size
    bounds = text.strip()[len("random:"):].split("-", maxsplit=1)
    if len(bounds) != 2:
        raise UserError(f"--image-resolution {text}: random bounds are random:MINHxMINW-MAXHxMAXW "
                        "(random:256x256-1024x1024)")  # fmt: skip
    low, high = _size(bounds[0]), _size(bounds[1])
    if low[0] > high[0] or low[1] > high[1]:
        raise UserError(f"--image-resolution {text}: the minimum exceeds the maximum")
    return low, high


def _image_token_id(tok: SglTokenizer) -> int | None:
    """The processor's ``image_token_id``: its configured image token, else Qwen's ``<|image_pad|>``."""
    folder = tok.path if tok.path.is_dir() else tok.path.parent
    for name in ("processor_config.json", "preprocessor_config.json"):
        file = folder / name
        if file.is_file():
            token = json.loads(file.read_text(encoding="utf-8")).get("image_token")
            if isinstance(token, str) and tok.token_id(token) is not None:
                return tok.token_id(token)
    token = tok.config.get("image_token")
    return tok.token_id(token if isinstance(token, str) else "<|image_pad|>")


def _row(text: str, images: list[str], output_len: int, tok: SglTokenizer, backend: str) -> SglRow:
    """``create_mm_data_row``: the raw text on chat backends, else the chat template over images and text."""
    if backend not in IMAGE_BACKENDS:
        raise UserError(f"--backend {backend}: SGLang sends image rows only to {', '.join(IMAGE_BACKENDS)}")
    if backend in _RAW_TEXT:
        return SglRow(text, None, output_len, image_data=images)
    items: list[dict[str, Any]] = [{"type": "image", "image": {"url": b64}} for b64 in images]
    prompt = tok.apply_chat_template([{"role": "user", "content": [*items, {"type": "text", "text": text}]}])
    return SglRow(prompt if prompt is not None else f"<image>{text}", None, output_len, image_data=images)


def _encode_image(rngs: VllmRng, size: tuple[int, int], blank: bool, fmt: str) -> str:
    import numpy as np
    from PIL import Image

    width, height = size
    arr = np.full((height, width, 3), 255, dtype=np.uint8) if blank else (
        rngs.np.rand(height, width, 3) * 255).astype(np.uint8)  # fmt: skip
    buf = io.BytesIO()
    try:
        Image.fromarray(arr).save(buf, format=fmt, quality=85)
    except (KeyError, ValueError, OSError) as exc:
        raise UserError(f"--image-format {fmt}: pillow cannot write it ({exc}); use jpeg or png") from None
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode()}"


def image_rows(ns: argparse.Namespace, tok: SglTokenizer) -> list[SglRow]:
    """``sample_image_requests`` with the generators re-seeded (as SGLang re-seeds after loading the processor)."""
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
    except ImportError:
        raise UserError("--dataset-name image draws images with numpy and pillow: "
                        "pip install 'lmmbench[bench]'") from None
    rngs = VllmRng(ns.seed)
    n, count = ns.num_prompts, ns.image_count
    (min_w, min_h), (max_w, max_h) = parse_resolution(ns.image_resolution)
    randomized = ns.image_resolution.strip().lower().startswith("random:")
    counts = [int(c) for c in rngs.np.randint(1, count + 1, size=n)] if ns.random_image_count else [count] * n
    in_lens = compute_random_lens(rngs, ns.random_input_len, ns.random_range_ratio, n)
    out_lens = compute_random_lens(rngs, ns.random_output_len, ns.random_range_ratio, n)
    pad = _image_token_id(tok)
    rows = []
    for i in range(n):
        text = gen_mm_prompt(rngs, tok, pad, in_lens[i])
        images = []
        for _ in range(counts[i]):
            size = (int(rngs.np.randint(min_w, max_w + 1)), int(rngs.np.randint(min_h, max_h + 1))) if randomized \
                else (min_w, min_h)  # fmt: skip
            images.append(_encode_image(rngs, size, ns.image_content == "blank", ns.image_format))
        rows.append(_row(text, images, out_lens[i], tok, ns.backend))
    return rows


def _load_mmmu() -> Any:
    try:
        import datasets
    except ImportError:
        raise UserError("--dataset-name mmmu reads MMMU/MMMU with the datasets library: "
                        "pip install 'lmmbench[hub-datasets]'") from None  # fmt: skip
    try:
        return datasets.load_dataset(MMMU_REPO, MMMU_SUBSET, split="test")
    except Exception as exc:  # datasets raises many kinds; each is one line here
        raise UserError(f"--dataset-name mmmu: cannot load {MMMU_REPO} ({MMMU_SUBSET}, test) with datasets "
                        f"({type(exc).__name__}); online it is downloaded, offline (HF_HUB_OFFLINE=1) it must be in "
                        "the datasets cache") from None  # fmt: skip


def mmmu_rows(ns: argparse.Namespace, tok: SglTokenizer, rngs: VllmRng) -> list[SglRow]:
    """``sample_mmmu_requests``: ``--num-prompts`` rows sampled at random (all when there are fewer), each one's
    ``image_1`` as a PNG data URI and "Question: ...\\n\\nAnswer: ", ``--random-output-len`` tokens out."""
    if ns.backend not in IMAGE_BACKENDS:  # SGLang drops every row then, and stops with no request
        raise UserError(f"--backend {ns.backend}: SGLang sends image rows only to {', '.join(IMAGE_BACKENDS)}")
    ds = _load_mmmu()
    if len(ds) > ns.num_prompts:
        ds = ds.select(rngs.py.sample(range(len(ds)), ns.num_prompts))
    rows = []
    for example in ds:
        image = example.get("image_1")
        if image is None or not hasattr(image, "save"):
            continue
        if image.mode == "RGBA":
            image = image.convert("RGB")
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        rows.append(_row(f"Question: {example.get('question')}\n\nAnswer: ", [uri], ns.random_output_len, tok,
                         ns.backend))  # fmt: skip
    return rows

