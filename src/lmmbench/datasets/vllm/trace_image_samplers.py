"""Two more of ``vllm bench serve``'s datasets (vLLM 0.33.0): ``custom_image`` (JSONL rows of a prompt with image
files, or OpenAI content parts) and ``timed_trace`` (a Mooncake-style JSONL trace replayed at its timestamps,
each prompt built from blocks of random token ids keyed by the row's hash ids).

Written from vLLM's ``CustomImageDataset`` and ``TimedTrace``. One difference, for repeatable runs: vLLM seeds each
trace block's tokens with Python's ``hash()`` of the block key, which changes from process to process; here the
seed is the key's CRC-32, so the same trace gives the same prompts on every run.
"""

from __future__ import annotations

import base64
import io
import json
import math
import random
import zlib
from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError
from lmmbench.datasets.vllm.samplers import VllmRng, VllmSample, VllmTokenizer, _oversample

__all__ = ["TraceLabels", "sample_custom_image", "sample_timed_trace"]


def _read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    from lmmbench.config.input_files import read_text

    if not str(path).endswith(".jsonl"):
        raise UserError(f"--dataset-path {path}: {what} is a .jsonl file, as vLLM's")
    rows = []
    for i, line in enumerate(read_text(path, "--dataset-path").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{path}:{i}: not JSON ({exc})") from None
        except RecursionError:
            raise UserError(f"{path}:{i}: JSON nested too deeply") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{i}: each line is a JSON object")
        rows.append(row)
    return rows


def _image(ref: str, client_side: bool) -> dict[str, Any]:
    """vLLM's ``process_image`` of a path or URL: as given (a path as file://), or loaded and sent as PNG data."""
    url = ref if ref.startswith(("http://", "https://", "file://", "data:image/")) else f"file://{ref}"
    if client_side and not url.startswith("data:image/"):
        if not url.startswith("file://"):
            raise UserError(f"--custom-ensure-client-side-data: {url}: lmmbench loads local image files only")
        try:
            from PIL import Image

            with Image.open(url.removeprefix("file://")) as img:
                buf = io.BytesIO()
                img.convert("RGB").save(buf, format="PNG")
        except ImportError:
            raise UserError("--custom-ensure-client-side-data needs pillow: pip install 'lmmbench[bench]'") from None
        except OSError as exc:
            raise UserError(f"{url}: cannot read the image ({exc})") from None
        url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def _part(part: Any, client_side: bool) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "image" and isinstance(part.get("image"), str):
        return _image(part["image"], client_side)
    if kind == "image_url":
        ref = part.get("image_url")
        if isinstance(ref, str):
            return _image(ref, client_side)
        if isinstance(ref, dict) and isinstance(ref.get("url"), str):
            out = _image(ref["url"], client_side)
            out["image_url"].update({k: v for k, v in ref.items() if k != "url"})
            return out
    raise UserError(f"content part {part!r}: expected type text, image or image_url (vLLM's custom_image format)")


def sample_custom_image(tok: VllmTokenizer, rngs: VllmRng, path: Path, n: int, output_len: int | None, id_prefix: str,
                        shuffle: bool, no_oversample: bool, client_side: bool) -> list[VllmSample]:  # fmt: skip
    """vLLM's ``custom_image``: ``{"prompt", "image_files": [...]}`` or ``{"content": [parts]}`` rows, shuffled."""
    rows = _read_jsonl(path, "custom_image")
    for i, row in enumerate(rows, 1):
        if not (("prompt" in row and "image_files" in row) or "content" in row):
            raise UserError(f"{path}: row {i} needs 'prompt' and 'image_files', or 'content'")
    rngs.py.seed(rngs.seed)
    if shuffle:
        rngs.py.shuffle(rows)
    n = len(rows) if n <= 0 else n
    out: list[VllmSample] = []
    for i, row in enumerate(rows[:n]):
        if "content" in row:
            if not isinstance(row["content"], list) or not row["content"]:
                raise UserError(f"{path}: 'content' must be a non-empty list of parts")
            parts = [_part(p, client_side) for p in row["content"]]
            text = "".join(p["text"] for p in parts if p["type"] == "text")
            out.append(VllmSample(parts, len(tok.encode(text, True)), output_len or 0, None, f"{id_prefix}{i}"))
            continue
        images = row["image_files"]
        if not isinstance(images, list) or not images or not isinstance(row["prompt"], str):
            raise UserError(f"{path}: 'prompt' must be a string and 'image_files' a non-empty list")
        mm = [_image(str(x), client_side) for x in images]
        out.append(VllmSample(row["prompt"], len(tok.encode(row["prompt"], True)), output_len or 0, mm,
                              f"{id_prefix}{i}"))  # fmt: skip
    _oversample(out, n, rngs, id_prefix, no_oversample)
    return out


class TraceLabels:
    """The --timed-trace-* options."""

    def __init__(self, chunk: int = 16, multiplier: float = 1.0, ts: str = "timestamp", inp: str = "input_length",
                 out: str = "output_length", hashes: str = "hash_ids") -> None:  # fmt: skip
        self.chunk, self.multiplier, self.ts, self.inp, self.out, self.hashes = chunk, multiplier, ts, inp, out, hashes


def sample_timed_trace(tok: VllmTokenizer, rngs: VllmRng, path: Path, n: int, labels: TraceLabels,
                       id_prefix: str) -> list[VllmSample]:  # fmt: skip
    """vLLM's ``timed_trace``: the first ``n`` rows, pre-tokenized prompts from cached random blocks, timestamps
    times --timed-trace-sec-multiplier."""
    if labels.chunk < 1:
        raise UserError("--timed-trace-chunk-hash-size must be at least 1")
    rngs.py.seed(rngs.seed)
    rngs.np.seed(rngs.seed)
    vocab = sorted(set(tok.tok.get_vocab(with_added_tokens=True).values()) - set(tok.special_ids))
    blocks: dict[str, list[int]] = {}
    out: list[VllmSample] = []
    for i, row in enumerate(_read_jsonl(path, "a timed trace")):
        if len(out) >= n:
            break
        missing = [k for k in (labels.inp, labels.out, labels.ts) if row.get(k) is None]
        if missing:
            raise UserError(f"{path}: row {i + 1} has no {missing[0]!r} (fields: {', '.join(row)}); name the field "
                            "with --timed-trace-label-*")  # fmt: skip
        n_in, n_out, at_s = _trace_numbers(path, i, row, labels)
        left, ids = n_in, []
        for h in row.get(labels.hashes) or []:
            size = labels.chunk if left >= labels.chunk else left
            key = f"{h}:{size}"
            if key not in blocks:
                blocks[key] = random.Random(zlib.crc32(key.encode())).choices(vocab, k=size)
            ids.extend(blocks[key])
            left -= size
            if left <= 0:
                break
        out.append(VllmSample(ids, len(ids), n_out, None, f"{id_prefix}{i}", at_s * labels.multiplier))
    return out


def _trace_numbers(path: Path, i: int, row: dict[str, Any], labels: TraceLabels) -> tuple[int, int, float]:
    """A trace row's input length, output length and timestamp; a value that is not a number is one line."""
    values: list[float] = []
    for key in (labels.inp, labels.out, labels.ts):
        value = row[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise UserError(f"{path}: row {i + 1}: {key!r} is {value!r}, not a number; fix the row or name "
                                "another field with --timed-trace-label-*") from None  # fmt: skip
        if not math.isfinite(value):
            raise UserError(f"{path}: row {i + 1}: {key!r} is {value!r}, not a finite number")
        values.append(float(value))
    for key, value, bound in ((labels.inp, values[0], "input_tokens"), (labels.out, values[1], "output_tokens")):
        if value < 0:
            raise UserError(f"{path}: row {i + 1}: {key!r} is {value:g}, a length is at least 0")
        check_limit(bound, value, f"{path}: row {i + 1}: {key!r}")
    hashes = row.get(labels.hashes) or []
    check_limit("hash_ids", len(hashes) if isinstance(hashes, list) else 0, f"{path}: row {i + 1}: {labels.hashes!r}")
    return int(values[0]), int(values[1]), values[2]
