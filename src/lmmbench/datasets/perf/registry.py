"""Request builders for load tests: synthetic exact-length prompts, ShareGPT, simple JSONL, multimodal.

Every builder is seeded, so a run is reproducible. With a local tokenizer (``tokenizers`` only),
synthetic prompts have exactly ``input_tokens`` tokens (``len(encode(prompt,
add_special_tokens=False)) == n``; a chat template on the server adds its own tokens on top,
which the server's ``usage.prompt_tokens`` shows). Without one, word mode: prompts of ``n`` words
and lengths counted in words.
"""

from __future__ import annotations

import base64
import csv
import math
import mimetypes
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry
from lmmbench.core.request_records import PerfRequest
from lmmbench.datasets.json_lines import parse_json_lines

__all__ = [
    "PERF_DATASETS", "DatasetBuilder", "count_tokens", "load_tokenizer", "output_length",
    "request_body", "synthetic_prompt", "synthetic_text", "token_pool",
]  # fmt: skip

_WORDS = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name "
    "president team minute idea kid body information back parent face others level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher force education"
).split()


def load_tokenizer(path: Path | str) -> Any:
    """A ``tokenizers.Tokenizer`` from a built-in tiny model's name (``tiny-llm``, built on first use), a local
    directory (its tokenizer.json), a tokenizer.json file, or a Hugging Face hub id (``ORG/NAME[@REV]``, resolved
    through the local hub cache: only its tokenizer files)."""
    from tokenizers import Tokenizer

    from lmmbench.core.hub import looks_like_hub_id, resolve_hub_snapshot
    from lmmbench.models.tiny import TINY_MODEL_NAMES, build_tiny_model

    if str(path) in TINY_MODEL_NAMES and not Path(path).exists():  # a built-in model's tokenizer (README)
        path = build_tiny_model(str(path))
    elif looks_like_hub_id(str(path)):
        path = Path(resolve_hub_snapshot(str(path), "--tokenizer", ["tokenizer*", "*.json", "*.txt", "*.model"]).path)
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"--tokenizer {path}: no tokenizer.json there; give a local tokenizer directory, a hub id or a "
                        "built-in model's name (tiny-llm, tiny-vl, tiny-omni)")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise UserError(f"--tokenizer {file}: cannot load: {exc}") from None


def _safe_ids(tok: Any) -> list[int]:
    vocab: dict[str, int] = tok.get_vocab(with_added_tokens=False)
    ids = []
    for _, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        piece = tok.decode([i]).strip()
        if piece.isalpha() and len(piece) >= 2:
            ids.append(i)
        if len(ids) >= 8000:
            break
    if len(ids) < 10:
        raise UserError("tokenizer: too few plain word tokens to build synthetic prompts")
    return ids


def synthetic_text(tok: Any, ids_pool: list[int], n: int, rng: random.Random) -> tuple[str, int]:
    """A random text of exactly ``n`` tokens (or the closest found, with its real length)."""
    ids = [rng.choice(ids_pool) for _ in range(n)]
    best = ("", 0)
    for _ in range(30):
        text = tok.decode(ids)
        got = tok.encode(text, add_special_tokens=False).ids
        if len(got) == n:
            return text, n
        if abs(len(got) - n) < abs(best[1] - n) or not best[0]:
            best = (text, len(got))
        ids = got[:n] if len(got) > n else got + [rng.choice(ids_pool) for _ in range(n - len(got))]
    return best


def _length(rng: random.Random, mean: int, sd: float, range_ratio: float = 0.0) -> int:
    """A length around ``mean``: uniform in [mean(1-r), mean(1+r)] (vLLM's range ratio), else normal."""
    if range_ratio > 0:
        return rng.randint(max(1, math.floor(mean * (1 - range_ratio))), math.ceil(mean * (1 + range_ratio)))
    return max(1, round(rng.gauss(mean, sd))) if sd > 0 else mean


def chat_or_prompt(cfg: PerfConfig, body: dict[str, Any], content: Any) -> None:
    """Put ``content`` into ``body`` as chat messages (after the system prompt) or as a prompt."""
    if cfg.endpoint == "chat":
        msgs: list[dict[str, Any]] = []
        if cfg.system_prompt:
            msgs.append({"role": "system", "content": cfg.system_prompt})
        msgs.append({"role": "user", "content": content})
        body["messages"] = msgs
    else:
        if not isinstance(content, str):
            raise UserError("multimodal prompts need --endpoint chat")
        body["prompt"] = content


def request_body(cfg: PerfConfig, content: Any, max_tokens: int | None) -> dict[str, Any]:
    """The JSON body of one request (without model / stream): the content and the output length."""
    body: dict[str, Any] = {}
    chat_or_prompt(cfg, body, content)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
        if cfg.ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
    return body



def count_tokens(tok: Any | None, text: str) -> int:
    """Tokens of ``text`` with the tokenizer, or words in word mode."""
    return len(tok.encode(text, add_special_tokens=False).ids) if tok is not None else len(text.split())



def output_length(cfg: PerfConfig, rng: random.Random, own: int | None) -> int | None:
    """max_tokens of a request: --output-tokens (with its spread), else the dataset's own length."""
    if cfg.output_tokens is not None:
        return _length(rng, cfg.output_tokens, cfg.output_tokens_stddev, cfg.random_range_ratio)
    return own


_Item = tuple[Any, int | None, int | None, dict[str, Any]]

#: A dataset builder: (config, number of requests, tokenizer or None, seeded rng) -> requests.
DatasetBuilder = Callable[[PerfConfig, int, Any | None, random.Random], list[PerfRequest]]

#: The datasets of ``lmmbench perf --dataset`` (all of them registered: lmmbench.datasets.perf.catalog).
PERF_DATASETS: Registry[DatasetBuilder] = Registry("perf_dataset")


def _from_items(cfg: PerfConfig, n: int, rng: random.Random, base: list[_Item]) -> list[PerfRequest]:
    rng.shuffle(base)
    out = []
    for i in range(n):
        content, in_len, own_out, extra = base[i % len(base)]
        payload = request_body(cfg, content, output_length(cfg, rng, own_out))
        payload.update(extra)
        out.append(PerfRequest(i, payload, cfg.endpoint, in_len, payload.get("max_tokens")))
    return out


def _file_dataset(read: Callable[[PerfConfig, Path, Any | None], list[_Item]]) -> DatasetBuilder:
    def build(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
        assert cfg.dataset_path is not None
        return _from_items(cfg, n, rng, read(cfg, cfg.dataset_path, tok))

    return build


@PERF_DATASETS.register("synthetic")
def _synthetic(cfg: PerfConfig, n: int, tok: Any | None, rng: random.Random) -> list[PerfRequest]:
    pool = _safe_ids(tok) if tok is not None else []
    out = []
    for i in range(n):
        length = _length(rng, cfg.input_tokens, cfg.input_tokens_stddev, cfg.random_range_ratio)
        text, real = synthetic_prompt(tok, pool, length, rng)
        max_tokens = output_length(cfg, rng, 32)
        out.append(PerfRequest(i, request_body(cfg, text, max_tokens), cfg.endpoint, real, max_tokens))
    return out


def synthetic_prompt(tok: Any | None, pool: list[int], n: int, rng: random.Random) -> tuple[str, int]:
    """A random text of ``n`` tokens (tokenizer) or ``n`` words (word mode), and its real length."""
    if tok is not None:
        return synthetic_text(tok, pool, n, rng)
    return " ".join(rng.choice(_WORDS) for _ in range(n)), n


def token_pool(tok: Any | None) -> list[int]:
    """Plain word token ids of ``tok`` to build synthetic prompts from ([] in word mode)."""
    return _safe_ids(tok) if tok is not None else []


def _read_json_rows(path: Path) -> list[tuple[int, Any]]:
    from lmmbench.config.input_files import load_json, read_text

    text = read_text(path, "dataset file")
    if text.lstrip().startswith("["):
        return list(enumerate(load_json(text, path), start=1))
    return parse_json_lines(text, path)


def _sharegpt(cfg: PerfConfig, path: Path, tok: Any | None) -> list[_Item]:
    items: list[_Item] = []
    for lineno, row in _read_json_rows(path):
        conv = row.get("conversations") or row.get("conversation") if isinstance(row, dict) else None
        if conv is not None and not isinstance(conv, list):
            raise UserError(f"{path}: row {lineno}: 'conversations' is {type(conv).__name__}, expected a list of "
                            "turns")  # fmt: skip
        if not isinstance(conv, list):
            continue
        turns = [t for t in conv if isinstance(t, dict)]
        for j, t in enumerate(turns):
            if t.get("from", t.get("role")) in ("human", "user"):
                prompt = str(t.get("value", t.get("content", "")))
                reply = turns[j + 1] if j + 1 < len(turns) else None
                own = count_tokens(tok, str(reply.get("value", reply.get("content", "")))) if reply else None
                if prompt.strip():
                    items.append((prompt, count_tokens(tok, prompt), own or None, {}))
                break
    if not items:
        raise UserError(f"{path}: no ShareGPT conversations (rows with 'conversations': [{{from, value}}])")
    return items


def _jsonl(cfg: PerfConfig, path: Path, tok: Any | None) -> list[_Item]:
    items: list[_Item] = []
    for lineno, row in _read_json_rows(path):
        if not isinstance(row, dict):
            raise UserError(f"{path}:{lineno}: expected an object with 'prompt' or 'messages'")
        extra = row.get("extra") or {}
        own = row.get("max_tokens", row.get("output_tokens"))
        if "messages" in row:
            if cfg.endpoint != "chat":
                raise UserError(f"{path}:{lineno}: 'messages' rows need --endpoint chat")
            msgs = row["messages"]
            text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
            extra = {**extra, "messages": msgs}
            items.append((text, count_tokens(tok, text), own, extra))
        elif isinstance(row.get("prompt"), str):
            items.append((row["prompt"], count_tokens(tok, row["prompt"]), own, extra))
        else:
            raise UserError(f"{path}:{lineno}: expected a 'prompt' string or a 'messages' list")
    if not items:
        raise UserError(f"{path}: empty dataset")
    return items


def _data_uri(path: Path, default_mime: str) -> str:
    mime = mimetypes.guess_type(path.name)[0] or default_mime
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


def _manifest_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of the media manifest: id, video, image, audio (resolved paths or None), prompt."""
    try:
        from lmmbench.media.manifest import load_manifest
    except ImportError:  # the media package is optional here: parse the CSV ourselves
        pass
    else:
        return [{"id": r.id, "video": r.video, "image": r.image, "audio": r.audio, "prompt": r.prompt}
                for r in load_manifest(path)]  # fmt: skip
    rows = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = {"id", "video", "image", "audio", "prompt"} - set(reader.fieldnames or [])
        if missing:
            raise UserError(f"{path}: missing columns {sorted(missing)}")
        for lineno, row in enumerate(reader, start=2):
            out: dict[str, Any] = {"id": row["id"], "prompt": row["prompt"]}
            for col in ("video", "image", "audio"):
                raw = (row.get(col) or "").strip()
                p = (path.parent / raw) if raw else None
                if p is not None and not p.is_file():
                    raise UserError(f"{path}:{lineno}: {col} file not found: {raw}")
                out[col] = p
            rows.append(out)
    return rows


def _multimodal(cfg: PerfConfig, path: Path) -> list[_Item]:
    if cfg.endpoint != "chat":
        raise UserError("--dataset multimodal needs --endpoint chat")
    items: list[_Item] = []
    for row in _manifest_rows(path):
        parts: list[dict[str, Any]] = []
        if row.get("image"):
            parts.append({"type": "image_url", "image_url": {"url": _data_uri(row["image"], "image/png")}})
        if row.get("video"):
            parts.append({"type": "video_url", "video_url": {"url": _data_uri(row["video"], "video/mp4")}})
        if row.get("audio"):
            audio: Path = row["audio"]
            fmt = audio.suffix.lstrip(".").lower() or "wav"
            data = base64.b64encode(audio.read_bytes()).decode()
            parts.append({"type": "input_audio", "input_audio": {"data": data, "format": fmt}})
        parts.append({"type": "text", "text": str(row.get("prompt", ""))})
        items.append((parts, None, None, {}))
    if not items:
        raise UserError(f"{path}: the manifest has no rows")
    return items


PERF_DATASETS.add("sharegpt", _file_dataset(_sharegpt))
PERF_DATASETS.add("jsonl", _file_dataset(_jsonl))
PERF_DATASETS.add("multimodal", _file_dataset(lambda cfg, path, tok: _multimodal(cfg, path)))
