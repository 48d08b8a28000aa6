"""The request samplers of ``vllm bench serve`` (vLLM 0.33.0): ``random``, ``random-mm``, ``prefix_repetition``,
``sharegpt`` and ``custom``, drawing the same requests as vLLM's for the same seed and tokenizer.

Written from vLLM's description of each sampler in ``vllm/benchmarks/datasets/datasets.py``: the same random
streams (numpy ``default_rng(seed)`` for random / random-mm; numpy's and Python's global generators, seeded
as vLLM seeds them, for prefix_repetition, sharegpt, custom and the oversampling), drawn in the same order.
``tests/perf/test_vllm_samplers.py`` compares the draws with those of vLLM's own code
(``benchmarks/vllm_sampler_fixtures.py``). Needs numpy (and pillow for images): ``pip install lmmbench[bench]``.

The tokenizer is a ``tokenizers.Tokenizer`` read the way a Hugging Face fast tokenizer reads it: the vocabulary
without added tokens, the special added tokens as the prohibited ids, decoding that keeps special tokens.
"""

from __future__ import annotations

import base64
import io
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError

__all__ = ["VllmRng", "VllmSample", "VllmTokenizer", "custom_samples", "sample_custom", "sample_prefix_repetition",
           "sample_random", "sample_random_mm", "sample_sharegpt"]  # fmt: skip


def _np() -> Any:
    try:
        import numpy
    except ImportError:
        raise UserError("vLLM's datasets need numpy: pip install 'lmmbench[bench]'") from None
    return numpy


@dataclass
class VllmSample:
    """One drawn request: vLLM's ``SampleRequest`` fields that reach the request."""

    prompt: Any  # text; token ids (timed_trace); OpenAI content parts (custom_image rows with "content")
    prompt_len: int
    output_len: int
    mm: list[dict[str, Any]] | None = None
    request_id: str | None = None
    timestamp: float | None = None  # seconds from the start (timed_trace)


class VllmRng:
    """Python's and numpy's global generators, as ``vllm bench serve`` seeds them (``random.seed(seed)``,
    ``np.random.seed(seed)``); samplers that re-seed them do so here."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.py = random.Random(seed)
        self.np = _np().random.RandomState(seed)


class VllmTokenizer:
    """The parts of a Hugging Face tokenizer vLLM's samplers use, on a ``tokenizers.Tokenizer``."""

    def __init__(self, tok: Any, clean_up_spaces: bool = False) -> None:
        self.tok = tok
        self.vocab_size: int = tok.get_vocab_size(with_added_tokens=False)
        self.special_ids: list[int] = sorted(i for i, t in tok.get_added_tokens_decoder().items() if t.special)
        self.num_special: int = tok.num_special_tokens_to_add(False)
        self.clean_up_spaces = clean_up_spaces

    @classmethod
    def load(cls, path: Path | str) -> VllmTokenizer:
        """From a tokenizer directory (or tokenizer.json); tokenizer_config.json's clean-up setting is honoured."""
        from lmmbench.datasets.chat_templates import read_json_object
        from lmmbench.datasets.perf.registry import load_tokenizer

        p = Path(path)
        config = read_json_object((p if p.is_dir() else p.parent) / "tokenizer_config.json")
        clean = bool(config.get("clean_up_tokenization_spaces", False))
        return cls(load_tokenizer(path), clean)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids: list[int] = self.tok.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def surely_longer_than(self, text: str, n: int, probe_chars: int = 65_536) -> bool:
        """Whether ``text`` encodes to more than ``n`` tokens, decided from its first ``probe_chars`` characters
        without encoding it whole: every pre-token of the prefix but the last (which the cut may split) is a
        pre-token of the text, and each gives at least one token. False when the prefix cannot tell."""
        pre = self.tok.pre_tokenizer
        if len(text) <= probe_chars or pre is None:
            return False
        head = text[:probe_chars]
        if self.tok.normalizer is not None:
            head = self.tok.normalizer.normalize_str(head)
        return len(pre.pre_tokenize_str(head)) - 1 > n

    def decode(self, ids: list[int]) -> str:
        text: str = self.tok.decode(ids, skip_special_tokens=False)
        if self.clean_up_spaces:  # transformers' clean_up_tokenization
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                         (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):  # fmt: skip
                text = text.replace(a, b)
        return text


def _to_target_len(tok: VllmTokenizer, ids: list[int], target: int, np_draw: Any, max_retry: int = 10
                   ) -> tuple[str, list[int]]:  # fmt: skip
    """Decode, re-encode, pad with random ids or cut, until the prompt has ``target`` tokens (vLLM's
    ``gen_prompt_decode_to_target_len``); ``np_draw(n)`` draws n ids."""
    tries = max_retry
    while True:
        prompt = tok.decode(ids)
        ids = tok.encode(prompt)
        if tries <= 0 or len(ids) == target:
            return prompt, ids
        if len(ids) < target:
            ids.extend(np_draw(target - len(ids)))
        else:
            ids = ids[:target]
        tries -= 1


def _range_ratios(ratio: float | dict[str, float]) -> tuple[float, float]:
    try:
        if isinstance(ratio, dict):
            return float(ratio["input"]), float(ratio["output"])
        return float(ratio), float(ratio)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"--random-range-ratio {ratio!r}: a number, or {{\"input\": r, \"output\": r}}") from None


def _lengths(rng: Any, n: int, ratio: float | dict[str, float], input_len: int, output_len: int,
             tok: VllmTokenizer) -> tuple[Any, Any, Any]:  # fmt: skip
    """Per-request input and output lengths and vocabulary offsets (vLLM's ``get_sampling_params``)."""
    r_in, r_out = _range_ratios(ratio)
    if not (0 <= r_in < 1 and 0 <= r_out < 1):
        raise UserError("--random-range-ratio: each ratio must be in [0, 1)")
    real = max(0, input_len - tok.num_special)
    in_lo, in_hi = math.floor(real * (1 - r_in)), math.ceil(real * (1 + r_in))
    out_lo = max(math.floor(output_len * (1 - r_out)), 1)
    out_hi = max(math.ceil(output_len * (1 + r_out)), 1)
    return (rng.integers(in_lo, in_hi + 1, size=n), rng.integers(out_lo, out_hi + 1, size=n),
            rng.integers(0, tok.vocab_size, size=n))  # fmt: skip


class _RandomText:
    """vLLM's RandomDataset text: one random prefix, then each request's run of allowed ids from its offset."""

    def __init__(self, tok: VllmTokenizer, seed: int, prefix_len: int) -> None:
        np = _np()
        self.tok, self.rng, self.prefix_len = tok, np.random.default_rng(seed), prefix_len
        special = set(tok.special_ids)
        self.allowed = np.array(list(set(range(tok.vocab_size)) - special))
        self.prefix: list[int] = []

    def draw(self, n: int) -> list[int]:
        out: list[int] = self.rng.integers(0, self.tok.vocab_size, size=n).tolist()
        return out

    def make_prefix(self) -> None:
        if self.prefix_len > 0:
            ids = self.allowed[self.rng.integers(0, len(self.allowed), size=self.prefix_len)].tolist()
            self.prefix = _to_target_len(self.tok, ids, self.prefix_len, self.draw)[1]

    def prompt(self, input_len: int, offset: int, index: int) -> tuple[str, int]:
        np = _np()
        inner = self.allowed[(offset + index + np.arange(input_len)) % len(self.allowed)].tolist()
        prompt, ids = _to_target_len(self.tok, self.prefix + inner, self.prefix_len + input_len, self.draw)
        return prompt, len(ids)


def _check_min_input(tok: VllmTokenizer, input_len: int, prefix_len: int, ratio: float | dict[str, float]) -> None:
    low = math.floor(max(0, input_len - tok.num_special) * (1 - _range_ratios(ratio)[0]))
    if prefix_len + low < 1:
        raise UserError(f"--random-input-len {input_len}: too small (the tokenizer adds {tok.num_special} special "
                        "tokens); raise it or --random-prefix-len")  # fmt: skip


def sample_random(tok: VllmTokenizer, seed: int, n: int, input_len: int, output_len: int,
                  ratio: float | dict[str, float] = 0.0, prefix_len: int = 0, id_prefix: str = "") -> list[VllmSample]:
    """vLLM's ``random`` dataset."""
    _check_min_input(tok, input_len, prefix_len, ratio)
    text = _RandomText(tok, seed, prefix_len)
    ins, outs, offsets = _lengths(text.rng, n, ratio, input_len, output_len, tok)
    text.make_prefix()
    out = []
    for i in range(n):
        prompt, length = text.prompt(int(ins[i]), int(offsets[i]), i)
        out.append(VllmSample(prompt, length, int(outs[i]), None, f"{id_prefix}{i}"))
    return out


#: vLLM's default --random-mm-bucket-config: (height, width, frames) -> probability
MM_BUCKETS_DEFAULT = {(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}


def _modality(bucket: tuple[int, int, int]) -> str:
    if bucket[-1] < 1:
        raise UserError(f"--random-mm-bucket-config: {bucket}: the frame count must be at least 1")
    return "image" if bucket[-1] == 1 else "video"


def _normalized(buckets: dict[tuple[int, int, int], float]) -> dict[tuple[int, int, int], float]:
    if any(v < 0 for v in buckets.values()):
        raise UserError("--random-mm-bucket-config: probabilities must be non-negative")
    kept = {k: v for k, v in buckets.items() if v > 0}
    if not kept:
        raise UserError("--random-mm-bucket-config: at least one bucket needs a probability above 0")
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()}


def _mm_items(rng: Any, lo: int, hi: int, buckets: dict[tuple[int, int, int], float],
              limits: dict[str, int]) -> Iterator[tuple[int, int, int]]:  # fmt: skip
    """The buckets of one request's items (vLLM's ``get_mm_item_iterator``)."""
    count = int(rng.integers(lo, hi + 1))
    if count == 0:
        return
    used = {_modality(k): 0 for k in buckets}
    left = dict(buckets)
    while sum(used.values()) < count:
        keys = list(left.keys())
        bucket = tuple(int(x) for x in keys[rng.choice(len(keys), p=list(left.values()))])
        mod = _modality(bucket)  # type: ignore[arg-type]
        if used[mod] < limits[mod]:
            used[mod] += 1
            yield bucket  # type: ignore[misc]
            continue
        left = {k: (0.0 if _modality(k) == mod else v) for k, v in left.items()}
        if all(v == 0 for v in left.values()):
            return
        left = _normalized(left)


def _image_part(rng: Any, height: int, width: int) -> dict[str, Any]:
    """A random RGB image as a JPEG data URL (as vLLM's ``process_image``)."""
    try:
        from PIL import Image
    except ImportError:
        raise UserError("--dataset-name random-mm needs pillow: pip install 'lmmbench[bench]'") from None
    pixels = rng.integers(0, 256, (height, width, 3), dtype=_np().uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).convert("RGB").save(buf, format="JPEG")
    return {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(buf.getvalue())
                                                .decode()}}  # fmt: skip


def _video_part(rng: Any, height: int, width: int, frames: int) -> dict[str, Any]:
    """Random RGB frames as an MP4 data URL (as vLLM: OpenCV's mp4v at 30 fps)."""
    import tempfile

    try:
        import cv2
    except ImportError:
        raise UserError("video buckets of --random-mm-bucket-config need OpenCV, as vLLM's: "
                        "pip install opencv-python-headless") from None  # fmt: skip
    pixels = rng.integers(0, 256, (frames, height, width, 3), dtype=_np().uint8)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "video.mp4"
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (width, height))  # type: ignore[attr-defined]
        try:
            for frame in pixels:
                writer.write(frame)
        finally:
            writer.release()
        data = path.read_bytes()
    return {"type": "video_url", "video_url": {"url": "data:video/mp4;base64," + base64.b64encode(data).decode()}}


@dataclass
class MmOptions:
    """The --random-mm-* options."""

    base_items: int = 1
    items_range_ratio: float = 0.0
    limits: dict[str, int] | None = None
    buckets: dict[tuple[int, int, int], float] | None = None


def _mm_bounds(opts: MmOptions) -> tuple[int, int, dict[str, int], dict[tuple[int, int, int], float]]:
    if not 0 <= opts.items_range_ratio <= 1:
        raise UserError("--random-mm-num-mm-items-range-ratio must be in [0, 1]")
    limits = dict(opts.limits if opts.limits is not None else {"image": 255, "video": 1})
    raw = opts.buckets if opts.buckets is not None else MM_BUCKETS_DEFAULT
    for k in raw:
        if _modality(k) not in limits:
            raise UserError(f"--random-mm-limit-mm-per-prompt has no limit for {_modality(k)} (bucket {k})")
    buckets = _normalized(raw)
    limits = {k: v for k, v in limits.items() if k in {_modality(b) for b in buckets}}
    hi = min(sum(limits.values()), math.ceil(opts.base_items * (1 + opts.items_range_ratio)))
    lo = max(0, math.floor(opts.base_items * (1 - opts.items_range_ratio)))
    if lo > hi:
        raise UserError(f"--random-mm-*: at least {lo} items per request but at most {hi}")
    return lo, hi, limits, buckets


def sample_random_mm(tok: VllmTokenizer, seed: int, n: int, input_len: int, output_len: int,
                     ratio: float | dict[str, float] = 0.0, prefix_len: int = 0, id_prefix: str = "",
                     mm: MmOptions | None = None) -> list[VllmSample]:  # fmt: skip
    """vLLM's ``random-mm`` dataset: random text as ``random``, then per request its images / videos."""
    text = _RandomText(tok, seed, prefix_len)
    ins, outs, offsets = _lengths(text.rng, n, ratio, input_len, output_len, tok)
    lo, hi, limits, buckets = _mm_bounds(mm or MmOptions())
    text.make_prefix()
    out = []
    for i in range(n):
        prompt, length = text.prompt(int(ins[i]), int(offsets[i]), i)
        parts = [(_image_part(text.rng, h, w) if f == 1 else _video_part(text.rng, h, w, f))
                 for h, w, f in _mm_items(text.rng, lo, hi, buckets, limits)]  # fmt: skip
        out.append(VllmSample(prompt, length, int(outs[i]), parts, f"{id_prefix}{i}"))
    return out


def sample_prefix_repetition(tok: VllmTokenizer, rngs: VllmRng, n: int, prefix_len: int = 256, suffix_len: int = 256,
                             num_prefixes: int = 10, output_len: int = 128, shuffle: bool = True) -> list[VllmSample]:
    """vLLM's ``prefix_repetition``: ``num_prefixes`` random prefixes, each with n // num_prefixes random suffixes
    (numpy's global generator, re-seeded), shuffled by Python's (re-seeded)."""
    if num_prefixes < 1:
        raise UserError(f"--prefix-repetition-num-prefixes {num_prefixes}: at least 1")
    per = n // num_prefixes
    if per == 0:
        raise UserError(f"--num-prompts {n} must be at least --prefix-repetition-num-prefixes {num_prefixes}")
    rngs.py.seed(rngs.seed)
    rngs.np.seed(rngs.seed)

    def draw(k: int) -> list[int]:
        out: list[int] = rngs.np.randint(0, tok.vocab_size, size=k).tolist()
        return out

    out = []
    for _ in range(num_prefixes):
        prefix = _to_target_len(tok, draw(prefix_len), prefix_len, draw)[1]
        for _ in range(per):
            ids = prefix + _to_target_len(tok, draw(suffix_len), suffix_len, draw)[1]
            out.append(VllmSample(tok.decode(ids), len(ids), output_len))
    if shuffle:
        rngs.py.shuffle(out)
    return out


def _oversample(samples: list[VllmSample], n: int, rngs: VllmRng, id_prefix: str, no_oversample: bool) -> None:
    """Repeat random drawn requests up to ``n`` (vLLM's ``maybe_oversample_requests``)."""
    if no_oversample or len(samples) >= n:
        return
    if not samples:
        raise UserError("the dataset gave no request to send")
    rngs.py.seed(rngs.seed)
    have = len(samples)
    extra = [replace(rngs.py.choice(samples), request_id=f"{id_prefix}{have + i}") for i in range(n - have)]
    samples.extend(extra)


def sample_sharegpt(tok: VllmTokenizer, rngs: VllmRng, path: Path, n: int, output_len: int | None = None,
                    id_prefix: str = "", shuffle: bool = True, no_oversample: bool = False) -> list[VllmSample]:
    """vLLM's ``sharegpt``: conversations with two turns or more, shuffled, the first human turn as the prompt,
    kept when 4 <= prompt tokens <= 1024 and prompt + output <= 2048 (and output >= 4 without --output-len)."""
    from lmmbench.config.input_files import load_json, read_text

    data = load_json(read_text(path, "--dataset-path"), path)
    if not isinstance(data, list):
        raise UserError(f"{path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} objects")
    data = [e for i, e in enumerate(data) if _sharegpt_turns(path, i, e) >= 2]
    rngs.py.seed(rngs.seed)
    if shuffle:
        rngs.py.shuffle(data)
    out: list[VllmSample] = []
    for entry in data:
        if len(out) >= n:
            break
        prompt, completion = entry["conversations"][0]["value"], entry["conversations"][1]["value"]
        if tok.surely_longer_than(prompt, 1024):  # vLLM drops it (> 1024 tokens): a huge turn is not encoded
            continue
        p_len = len(tok.encode(prompt, add_special_tokens=True))
        o_len = len(tok.encode(completion, add_special_tokens=True)) if output_len is None else output_len
        if p_len < 4 or (output_len is None and o_len < 4) or p_len > 1024 or p_len + o_len > 2048:
            continue
        mm = None
        if entry.get("image") or entry.get("video"):
            kind = "image" if entry.get("image") else "video"
            url = str(entry[kind])
            url = url if url.startswith(("http://", "https://", "file://", "data:")) else f"file://{url}"
            mm = [{"type": f"{kind}_url", f"{kind}_url": {"url": url}}]
        out.append(VllmSample(prompt, p_len, o_len, mm, f"{id_prefix}{len(out)}"))
    _oversample(out, n, rngs, id_prefix, no_oversample)
    return out


def row_text(value: Any, where: str, field: str) -> str:
    """A data-set row's text field: a string within the ``prompt_chars`` bound (checked before it is tokenised),
    else one line naming ``where`` (the file and the row) and the field."""
    if not isinstance(value, str):
        raise UserError(f"{where}: '{field}' is {type(value).__name__}, expected a string")
    check_limit("prompt_chars", len(value), f"{where}: '{field}' has characters")
    return value


def _sharegpt_turns(path: Path, index: int, entry: Any) -> int:
    """How many turns a ShareGPT entry has, its first two checked (a dict with a string ``value`` each)."""
    if not isinstance(entry, dict):
        return 0
    conv = entry.get("conversations")
    if conv is None:
        return 0
    if not isinstance(conv, list):
        raise UserError(f"{path}: row {index + 1}: 'conversations' is {type(conv).__name__}, expected a list of "
                        "turns")  # fmt: skip
    for turn in conv[:2]:
        if not isinstance(turn, dict):
            raise UserError(f"{path}: row {index + 1}: a turn is {type(turn).__name__}, expected {{'from', 'value'}}")
        row_text(turn.get("value"), f"{path}: row {index + 1}", "conversations[].value")
    return len(conv)


def sample_custom(tok: VllmTokenizer, rngs: VllmRng, path: Path, n: int, output_len: int | None = 256,
                  id_prefix: str = "", shuffle: bool = True, no_oversample: bool = False,
                  chat_template: Any | None = None) -> list[VllmSample]:  # fmt: skip
    """vLLM's ``custom``: JSONL rows with ``prompt`` (and ``output_tokens`` when --custom-output-len is -1),
    shuffled; ``chat_template(prompt)`` (vLLM's default, off with --skip-chat-template) wraps each prompt."""
    from lmmbench.config.input_files import read_text
    from lmmbench.datasets.json_lines import parse_json_lines

    if not str(path).endswith(".jsonl"):
        raise UserError(f"--dataset-path {path}: the custom dataset is a .jsonl file, as vLLM's")
    rows = []
    for line, row in parse_json_lines(read_text(path, "--dataset-path"), path):
        if not isinstance(row, dict) or "prompt" not in row:
            raise UserError(f"{path}:{line}: each line needs a 'prompt' field (vLLM's custom format)")
        row_text(row["prompt"], f"{path}:{line}", "prompt")
        if output_len is None or output_len == -1:
            row = {**row, "output_tokens": _output_tokens(row, f"{path}:{line}")}
        rows.append(row)
    rngs.py.seed(rngs.seed)
    if shuffle:
        rngs.py.shuffle(rows)
    return custom_samples(tok, rngs, rows, n, output_len, id_prefix, no_oversample, chat_template, path)


def _output_tokens(row: dict[str, Any], where: str) -> int:
    """A custom row's ``output_tokens``: a whole number from 1 to the ``output_tokens`` bound."""
    value = row.get("output_tokens")
    if isinstance(value, str):  # int(row["output_tokens"]) reads a numeric string too
        value = int(value) if value.strip().lstrip("+-").isdigit() else value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise UserError(f"{where}: 'output_tokens' {value!r}: a whole number >= 1 is needed without "
                        "--custom-output-len")  # fmt: skip
    check_limit("output_tokens", value, f"{where}: 'output_tokens'")
    return int(value)


def custom_samples(tok: VllmTokenizer, rngs: VllmRng, rows: list[dict[str, Any]], n: int, output_len: int | None,
                   id_prefix: str, no_oversample: bool, chat_template: Any | None, path: Path | str
                   ) -> list[VllmSample]:  # fmt: skip
    """vLLM's ``CustomDataset.sample`` over rows already loaded (and shuffled) with a ``prompt`` each: the first n
    (all when n <= 0), each prompt through ``chat_template``, counted with special tokens; then oversampled."""
    n = len(rows) if n <= 0 else n
    out: list[VllmSample] = []
    for i, row in enumerate(rows):
        if len(out) >= n:
            break
        if output_len is None or output_len == -1:
            o_len = _output_tokens(row, f"{path}: row {row!r}")
        else:
            o_len = output_len
        text = row_text(row["prompt"], f"{path}: row {i + 1}", "prompt")
        prompt = text if chat_template is None else chat_template(text)
        out.append(VllmSample(prompt, len(tok.encode(prompt, add_special_tokens=True)), o_len, None, f"{id_prefix}{i}"))
    _oversample(out, n, rngs, id_prefix, no_oversample)
    return out
