"""What AISBench sends for a gsm8k data set: the rows, each prompt as its ``PromptTemplate`` / ``ZeroRetriever`` /
``GenInferencer`` render it and each request body as its ``VLLMCustomAPI`` / ``VLLMCustomAPIChat`` write it.

Followed (read, not copied): ``ais_bench/benchmark/datasets/gsm8k.py`` (``GSM8KDataset.load``: ``<path>/test.jsonl``),
``datasets/utils/datasets.py`` (``get_data_path``: an absolute path as is, a relative one under
``$AIS_BENCH_DATASETS_CACHE`` or the folder holding the ``ais_bench`` package), ``openicl/icl_prompt_template``
(the row's columns substituted one after another, ``{answer}`` emptied), ``models/local_models/base.py``
(``LMTemplateParser`` without a meta template: a completions prompt joins the rounds' prompts with newlines),
``models/api_models/base_api.py`` (``APITemplateParser``: rounds of HUMAN / BOT up to the generating BOT turn,
consecutive turns of one role merged with a newline), ``vllm_custom_api.py`` / ``vllm_custom_api_chat.py``
(``get_request_body``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.config.dropins.aisbench_configs import AisDataset, AisModel
from lmmbench.core.errors import UserError

__all__ = ["AisItem", "data_folder", "load_items", "request_body"]

_ROLE_MAP = {"HUMAN": "user", "BOT": "assistant", "SYSTEM": "system"}


@dataclass
class AisItem:
    """One prompt of a data set: its index (AISBench's ``id``), the prompt as the model's template parser returns
    it (a string, or a list of ``{"role", "prompt"}`` turns for a chat model), and the gold answer."""

    index: int
    prompt: str | list[dict[str, str]]
    gold: Any
    max_out_len: int | None = None  # the data set's own (a synthetic row's): it wins over the model's


def data_folder(ds: AisDataset, root: Path | None) -> Path:
    """The data set's folder as AISBench's ``get_data_path`` finds it."""
    if ds.path.startswith("/"):
        return Path(ds.path)
    base = os.environ.get("AIS_BENCH_DATASETS_CACHE")
    if base is None and root is None:
        raise UserError(f"{ds.file}: data set path {ds.path!r} is relative to an AISBench installation: give "
                        "--aisbench-root, set AIS_BENCH_DATASETS_CACHE, or write an absolute path in the config")
    folder = Path(base) / ds.path if base is not None else Path(str(root)) / ds.path
    if not folder.exists():
        raise UserError(f"{ds.file}: data set path {folder} does not exist (AISBench's get_data_path looks there)")
    return folder


def _test_range(text: str | None, n: int) -> range:
    """``reader_cfg.test_range`` (``"[:N]"``, ``"[A:B]"``) as the indices it keeps."""
    if not text:
        return range(n)
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")) or inner.count(":") != 1:
        raise UserError(f"test_range {text!r}: lmmbench reads the slice forms '[:N]' and '[A:B]'")
    lo, hi = (p.strip() for p in inner[1:-1].split(":"))
    try:
        return range(n)[slice(int(lo) if lo else None, int(hi) if hi else None)]
    except ValueError:
        raise UserError(f"test_range {text!r}: the bounds must be whole numbers") from None


def _rows(folder: Path) -> list[dict[str, Any]]:
    from lmmbench.config.input_files import read_text

    path = folder / "test.jsonl"
    rows = []
    for n, line in enumerate(read_text(path, "gsm8k test split").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise UserError(f"{path}:{n}: a row must be a JSON object")
        rows.append(row)
    return rows


def _fill(text: str, entry: dict[str, Any]) -> str:
    for key, value in entry.items():  # AISBench's safe_format: each column in turn, by plain replacement
        text = text.replace("{" + str(key) + "}", str(value))
    return text


def render(ds: AisDataset, model: AisModel, row: dict[str, Any], index: int) -> str | list[dict[str, str]]:
    """The prompt of ``row`` as the model's template parser hands it to ``get_request_body``."""
    entry = {**row, "subdivision": ds.abbr, "idx": index, ds.output_column: ""}
    if isinstance(ds.template, str):
        return _fill(ds.template, entry)
    turns = [{"role": t["role"], "prompt": _fill(t["prompt"], entry)} for t in ds.template]
    if not model.chat:  # no meta template: every turn's prompt joined with a newline
        return "\n".join(t["prompt"] for t in turns if t["prompt"]) if turns else ""
    while turns and turns[-1]["role"] == "BOT":  # the last round stops at the BOT turn that generates
        turns.pop()
    merged: list[dict[str, str]] = []
    for t in turns:
        if merged and merged[-1]["role"] == t["role"]:
            merged[-1]["prompt"] += "\n" + t["prompt"]
        else:
            merged.append(dict(t))
    return merged


def load_items(ds: AisDataset, model: AisModel, root: Path | None, num_prompts: int | None) -> list[AisItem]:
    """The prompts of ``ds`` for ``model`` (``--num-prompts`` keeps the first N unless the config sets a
    test_range, as AISBench's ``fill_test_range_use_num_prompts`` does)."""
    if ds.kind == "synthetic" and ds.synthetic is not None:
        from lmmbench.config.dropins.aisbench_synthetic import synthetic_rows

        rows = synthetic_rows(ds.synthetic)
    else:
        rows = _rows(data_folder(ds, root))
    test_range = ds.test_range if ds.test_range else (f"[:{num_prompts}]" if num_prompts else None)
    keep = _test_range(test_range, len(rows))
    items = []
    for new_index, i in enumerate(keep):
        row = rows[i]
        missing = [c for c in (*ds.input_columns, ds.output_column) if c not in row]
        if missing:
            where = ds.file if ds.kind == "synthetic" else data_folder(ds, root) / "test.jsonl"
            raise UserError(f"{where}:{i + 1}: no column {missing[0]!r}")
        own = row.get("max_out_len")  # GenInferencer: the data set's max_out_len has the highest priority
        items.append(AisItem(new_index, render(ds, model, row, new_index), row[ds.output_column],
                             own if isinstance(own, int) and not isinstance(own, bool) and own else None))
    return items


def _sorted_keys(value: Any) -> Any:
    """``value`` with every dict's keys in ``str`` order: AISBench dumps its config with mmengine's
    ``Config.dump`` (``pretty_text`` writes each dict sorted by ``str(key)``) and runs from the reloaded dump
    (``cli/config_manager.py`` ``_dump_and_reload_config``), so ``generation_kwargs`` reach the body sorted."""
    if isinstance(value, dict):
        return {k: _sorted_keys(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def request_body(model: AisModel, prompt: str | list[dict[str, str]], max_out_len: int) -> dict[str, Any]:
    """The body AISBench's ``get_request_body`` posts (key order kept: ``generation_kwargs`` as its reloaded
    config holds them, sorted)."""
    gen = {**_sorted_keys(model.generation_kwargs), "max_tokens": max_out_len, "model": model.model}
    if model.chat:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [
            {"content": t["prompt"], "role": _ROLE_MAP.get(t["role"], t["role"])} for t in prompt]  # fmt: skip
        body: dict[str, Any] = {"stream": model.stream, "messages": messages}
        if model.stream:
            body["stream_options"] = {"include_usage": True}
        return body | gen
    body = {"prompt": prompt, "stream": model.stream} | gen
    if model.stream:
        body["stream_options"] = {"include_usage": True}
    return body
