"""vLLM 0.33.0's remaining ``bench serve`` data sets: ``burstgpt`` (its CSV), ``spec_bench`` (Spec-Bench's
question JSONL) and ``hf`` (the Hugging Face data sets its ``vllm/benchmarks/datasets`` names, read with the
``datasets`` library from the hub or its local cache, offline with ``HF_HUB_OFFLINE=1``).

Sampling follows vLLM where its sampler is plain Python: Spec-Bench's ``random.seed(seed); random.shuffle``, and
the oversampling of too few rows with ``random.choice`` after ``random.seed(seed)``; the ``hf`` rows are shuffled by
``datasets``' own ``shuffle(seed=...)`` (vLLM streams them, so its order can differ); BurstGPT's rows are drawn with
``random.Random(seed)`` (vLLM uses pandas). Where vLLM renders the tokenizer's chat template in its client, lmmbench
sends the user message to ``--endpoint chat`` (the server renders it) and the bare text to completions.
Every ``hf`` data set vLLM names is either accepted here or refused by name with the reason (``HF_REFUSED``).
"""

from __future__ import annotations

import base64
import csv
import io
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.datasets.perf.registry import (
    PERF_DATASETS,
    count_tokens,
    request_body,
    synthetic_prompt,
    token_pool,
)

__all__ = ["HF_DATASETS", "HF_REFUSED", "HfItem", "HfOptions", "HubClass", "burstgpt_rows", "hf_items",
           "spec_bench_prompts"]  # fmt: skip

Row = dict[str, Any]


@dataclass(frozen=True)
class HubClass:
    """One of vLLM's ``HuggingFaceDataset`` classes: default split / subset / output length, and its row reader
    (row -> (prompt text, the reference answer or None, image or None, system prompt or None))."""

    vllm_class: str
    split: str
    read: Callable[[Row], tuple[str, str | None, Any, str | None]]
    output_len: int | None = None  # None: the reference answer's length
    subset: str | None = None
    limits: tuple[int, int] = (1024, 2048)  # vLLM's is_valid_sequence: max prompt, max prompt + output


def _instruct_coder(x: Row) -> tuple[str, None, None, None]:
    return (f"{x['input']}\n\n{x['instruction']} Just output the code, do not include any explanation.", None, None,
            None)  # fmt: skip


def _conversation(x: Row) -> tuple[str, str, None, None]:
    return x["conversations"][0]["value"], x["conversations"][1]["value"], None, None


def _mmstar(x: Row) -> tuple[str, None, Any, None]:
    return str(x.get("question", "")).split("Options:", 1)[0].strip(), None, x["image"], None


_AIMO = HubClass("AIMODataset", "train", lambda x: (x["problem"], x["solution"], None, None), limits=(2048, 32000))
_MLPERF = HubClass("MLPerfDataset", "train", lambda x: (x["question"], x["output"], None, x["system_prompt"]))
_ARENA_CHAT = HubClass("VisionArenaDataset", "train", lambda x: (x["conversation"][0][0]["content"], None,
                                                                 x["images"][0], None), 128)  # fmt: skip
_ARENA_BENCH = HubClass("VisionArenaDataset", "train", lambda x: (x["turns"][0][0]["content"], None, x["images"][0],
                                                                  None), 128)  # fmt: skip
#: hub id -> how vLLM 0.33.0 reads it (``get_samples``' ``hf`` branch and each class's ``sample``)
HF_DATASETS: dict[str, HubClass] = {
    "Aeala/ShareGPT_Vicuna_unfiltered": HubClass("ConversationDataset", "train", _conversation),
    "likaixin/InstructCoder": HubClass("InstructCoderDataset", "train", _instruct_coder, 200),
    "philschmid/mt-bench": HubClass("MTBenchDataset", "train", lambda x: (x["turns"][0], None, None, None), 256),
    "openai/openai_humaneval": HubClass("HumanEvalDataset", "test", lambda x: (x["prompt"], None, None, None), 256),
    "openai/gsm8k": HubClass("GSM8KDataset", "test", lambda x: (x["question"], None, None, None), 256, "main"),
    "AI-MO/aimo-validation-aime": _AIMO, "AI-MO/NuminaMath-1.5": _AIMO, "AI-MO/NuminaMath-CoT": _AIMO,
    "mgoin/mlperf-inference-llama2-data": _MLPERF, "mgoin/mlperf-inference-llama3.1-data": _MLPERF,
    "lmarena-ai/VisionArena-Chat": _ARENA_CHAT, "lmarena-ai/vision-arena-bench-v0.1": _ARENA_BENCH,
    "Lin-Chen/MMStar": HubClass("MMStarDataset", "val", _mmstar, 128),
}  # fmt: skip
_ASR = "speech to text (vLLM's ASRDataset sends audio to /v1/audio/transcriptions, which lmmbench does not measure)"
#: the rest of vLLM's ``hf`` data sets, refused by name with the reason
HF_REFUSED: dict[str, str] = {
    "lmms-lab/LLaVA-OneVision-Data": "vLLM's MultiModalConversationDataset (image conversations) is not read yet",
    "yale-nlp/MMVU": "vLLM's MMVUDataset fetches each row's video file from the hub repository; not read yet",
    "vdaita/edit_5k_char": "vLLM's BlazeditDataset (code-edit prompts with a distance filter) is not read yet",
    "vdaita/edit_10k_char": "vLLM's BlazeditDataset (code-edit prompts with a distance filter) is not read yet",
    "zed-industries/zeta": "vLLM's NextEditPredictionDataset (Zeta's prompt format) is not read yet",
    "gorilla-llm/Berkeley-Function-Calling-Leaderboard": "vLLM's BFCLDataset sends per-request tool schemas; "
                                                         "not carried yet",
    **{k: _ASR for k in ("openslr/librispeech_asr", "facebook/voxpopuli", "LIUM/tedlium", "edinburghcstr/ami",
                         "speechcolab/gigaspeech", "kensho/spgispeech", "ArtificialAnalysis/Earnings22-Cleaned-AA",
                         "D4nt3/esb-datasets-earnings22-validation-tiny-filtered")},
}  # fmt: skip


def _oversample(items: list[Any], n: int, seed: int) -> list[Any]:
    """vLLM's ``maybe_oversample_requests``: the first n, topped up by ``random.choice`` after seeding."""
    out = items[:n]
    rnd = random.Random(seed)
    out += [rnd.choice(items) for _ in range(n - len(out))]
    return out


def _requests(cfg: PerfConfig, items: list[tuple[Any, int, int, dict[str, Any]]]) -> list[PerfRequest]:
    out = []
    for i, (content, in_len, out_len, extra) in enumerate(items):
        payload = request_body(cfg, content, out_len)
        payload.update(extra)
        out.append(PerfRequest(i, payload, cfg.endpoint, in_len, out_len))
    return out


def burstgpt_rows(path: Path) -> list[tuple[int, int]]:
    """BurstGPT's CSV as vLLM keeps it: (request tokens, response tokens) of the GPT-4 rows with a response."""
    rows: list[tuple[int, int]] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        try:
            missing = {"Model", "Request tokens", "Response tokens"} - set(reader.fieldnames or [])
            if missing:
                raise UserError(f"{path}: not a BurstGPT CSV: no column(s) {sorted(missing)}")
            for row in reader:
                rows.extend(_burstgpt_row(path, reader.line_num, row))
        except (csv.Error, UnicodeDecodeError) as exc:  # an unterminated quote runs to the field limit
            raise UserError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None
    if not rows:
        raise UserError(f"{path}: no GPT-4 rows with a response (vLLM keeps only those)")
    return rows


def _burstgpt_row(path: Path, lineno: int, row: dict[str, Any]) -> list[tuple[int, int]]:
    """One BurstGPT row, kept as vLLM keeps it (GPT-4 with a response), its counts checked and bounded."""
    try:
        req, resp = int(float(row["Request tokens"])), int(float(row["Response tokens"]))
    except (ValueError, TypeError, OverflowError):
        raise UserError(f"{path}:{lineno}: 'Request tokens' / 'Response tokens' must be numbers") from None
    if req < 0 or resp < 0:
        raise UserError(f"{path}:{lineno}: 'Request tokens' / 'Response tokens' must be at least 0")
    check_limit("input_tokens", req, f"{path}:{lineno}: 'Request tokens'")
    check_limit("output_tokens", resp, f"{path}:{lineno}: 'Response tokens'")
    return [(req, resp)] if row["Model"] == "GPT-4" and resp > 0 else []


@PERF_DATASETS.register("burstgpt")
def _burstgpt(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    """BurstGPT's CSV: GPT-4 rows with a response; each a synthetic prompt of its request tokens."""
    rows = burstgpt_rows(_path(cfg, "burstgpt", "BurstGPT's CSV (e.g. BurstGPT_without_fails_2.csv)"))
    rnd = random.Random(cfg.seed)
    picked = rnd.sample(rows, n) if n <= len(rows) else rnd.choices(rows, k=n)
    pool = token_pool(tok)
    items: list[tuple[Any, int, int, dict[str, Any]]] = []
    for req, resp in picked:
        text, real = synthetic_prompt(tok, pool, max(req, 1), rng)
        items.append((text, real, resp, {}))  # the row's response tokens, as vLLM (no override)
    return _requests(cfg, items)


def spec_bench_prompts(path: Path, category: str | None, seed: int, shuffle: bool = True) -> list[str]:
    """Spec-Bench's question.jsonl as vLLM loads it: each row's first turn (of ``category`` only, when given),
    shuffled by ``random.seed(seed); random.shuffle`` unless ``shuffle`` is off."""
    from lmmbench.config.input_files import read_text
    from lmmbench.datasets.json_lines import parse_json_lines
    from lmmbench.datasets.vllm.samplers import row_text

    prompts = []
    for lineno, row in parse_json_lines(read_text(path, "dataset file"), path):
        if not isinstance(row, dict) or not isinstance(row.get("turns"), list) or not row["turns"]:
            raise UserError(f"{path}:{lineno}: expected an object with a 'turns' list")
        first = row_text(row["turns"][0], f"{path}:{lineno}", "turns[0]")  # a null or a number is no prompt
        if not category or row.get("category") == category:
            prompts.append(first)
    if not prompts:
        which = f" of category {category}" if category else ""
        raise UserError(f"{path}: no rows{which}")
    if shuffle:
        random.Random(seed).shuffle(prompts)
    return prompts


@PERF_DATASETS.register("spec_bench")
def _spec_bench(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    """Spec-Bench's question.jsonl: each row's first turn, optionally of one category."""
    path = _path(cfg, "spec_bench", "Spec-Bench's question.jsonl")
    prompts = spec_bench_prompts(path, cfg.spec_bench_category, cfg.seed)
    out_len = cfg.spec_bench_output_len
    return _requests(cfg, [(p, count_tokens(tok, p), out_len, {}) for p in _oversample(prompts, n, cfg.seed)])


def _path(cfg: PerfConfig, name: str, what: str) -> Path:
    if cfg.dataset_path is None:
        raise UserError(f"--dataset {name} needs --dataset-path: {what}")
    return cfg.dataset_path


def _image_part(image: Any) -> dict[str, Any]:
    """An image of a ``datasets`` row (PIL image, or {bytes}) as a data-URI ``image_url`` part (JPEG, as vLLM)."""
    from PIL import Image

    if isinstance(image, dict) and image.get("bytes"):
        image = Image.open(io.BytesIO(image["bytes"]))
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG")
    return {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(buf.getvalue())
                                               .decode()}}  # fmt: skip


@dataclass(frozen=True)
class HfOptions:
    """What vLLM's ``hf`` loader reads of a command line (``--hf-*``, ``--dataset-path``, the seed)."""

    hf_name: str | None
    dataset_path: str | None
    subset: str | None
    split: str | None
    output_len: int | None
    seed: int
    shuffle: bool = True


@dataclass(frozen=True)
class HfItem:
    """One kept row: its text, tokens, output tokens, image (an ``image_url`` part) and system prompt."""

    text: str
    prompt_len: int
    output_len: int
    image: dict[str, Any] | None
    system: str | None


def _load_hf(opts: HfOptions, hub_id: str, spec: HubClass) -> Any:
    try:
        import datasets
    except ImportError:
        raise UserError("--dataset hf needs the datasets library: pip install 'lmmbench[hub-datasets]'") from None
    source = opts.dataset_path if opts.dataset_path is not None else hub_id
    try:
        ds = datasets.load_dataset(source, name=opts.subset or spec.subset, split=opts.split or spec.split)
    except Exception as exc:  # datasets raises many kinds; each is one line here
        raise UserError(f"--dataset hf {hub_id}: cannot load it with datasets ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); online it is downloaded, offline "
                        "(HF_HUB_OFFLINE=1) it must be in the datasets cache") from None  # fmt: skip
    return ds.shuffle(seed=opts.seed) if opts.shuffle else ds


def hf_items(opts: HfOptions, tok: Any | None, n: int) -> list[HfItem]:
    """Up to ``n`` rows of the ``hf`` data set vLLM names (``hf_name``, else ``dataset_path``) that vLLM's filter
    keeps, oversampled to ``n`` (a ``tokenizers.Tokenizer`` counts, or words without one)."""
    hub_id = opts.hf_name or opts.dataset_path or ""
    if hub_id in HF_REFUSED:
        raise UserError(f"--dataset hf {hub_id}: refused: {HF_REFUSED[hub_id]}")
    spec = HF_DATASETS.get(hub_id)
    if spec is None:
        raise UserError(f"--dataset hf {hub_id or '(no --hf-name / --dataset-path)'}: not one of vLLM's hf data "
                        f"sets; supported: {', '.join(HF_DATASETS)}")  # fmt: skip
    items: list[HfItem] = []
    for row in _load_hf(opts, hub_id, spec):
        if len(items) >= n:
            break
        item = _hf_item(opts, tok, spec, row)
        if item is not None:
            items.append(item)
    if not items:
        raise UserError(f"--dataset hf {hub_id}: no usable rows (vLLM's length filter: prompt <= {spec.limits[0]}, "
                        f"prompt + output <= {spec.limits[1]} tokens)")  # fmt: skip
    return _oversample(items, n, opts.seed)


@PERF_DATASETS.register("hf")
def _hf(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    """A Hugging Face data set that vLLM's ``hf`` loader names (``--hf-name``, else ``--dataset-path``)."""
    opts = HfOptions(cfg.hf_name, None if cfg.dataset_path is None else str(cfg.dataset_path), cfg.hf_subset,
                     cfg.hf_split, cfg.hf_output_len, cfg.seed)  # fmt: skip
    out: list[tuple[Any, int, int, dict[str, Any]]] = []
    for it in hf_items(opts, tok, n):
        content: Any = it.text if it.image is None else [it.image, {"type": "text", "text": it.text}]
        extra: dict[str, Any] = {}
        if it.system is not None:
            if cfg.endpoint == "chat":
                extra["messages"] = [{"role": "system", "content": it.system}, {"role": "user", "content": it.text}]
            else:
                content = f"{it.system}\n\n{it.text}"
        out.append((content, it.prompt_len, it.output_len, extra))
    return _requests(cfg, out)


def _hf_item(opts: HfOptions, tok: Any | None, spec: HubClass, row: Row) -> HfItem | None:
    """One row, or None when vLLM's length filter drops it."""
    try:
        text, answer, image, system = spec.read(row)
    except (KeyError, IndexError, TypeError) as exc:
        raise UserError(f"--dataset hf: a row lacks the field vLLM's {spec.vllm_class} reads ({exc!r}); "
                        f"columns: {sorted(row)}") from None  # fmt: skip
    in_len = count_tokens(tok, text)
    fixed = opts.output_len if opts.output_len is not None else spec.output_len
    out_len = fixed if fixed is not None else count_tokens(tok, answer or "")
    if fixed is None and not (4 <= in_len <= spec.limits[0] and out_len >= 4 and in_len + out_len <= spec.limits[1]):
        return None
    return HfItem(text, in_len, out_len, None if image is None else _image_part(image), system)
