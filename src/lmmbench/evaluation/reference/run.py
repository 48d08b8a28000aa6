"""Reference comparison, ByteMLPerf's accuracy check under its definitions (``bytemlperf_metrics``).

``dump_reference`` runs the prompts (52 by default, ByteMLPerf's count; its CSV in its template, ending
``\n答案：``) through a registered in-process engine at batch 1 (``trace``): each prompt's first-token logits
(``reference.npz``), its prompt log-probabilities, and a free-running greedy generation of ``--max-new-tokens``
steps with every step's maximum logit and top-k log-probabilities (``reference.json``). ``compare_reference``
checks the backend under test against it:

* an in-process engine (``--engine``, any registered): ByteMLPerf's ``PPL`` (per prompt, averaged over its
  generated steps), ``Logits Diff`` of the first token (max difference, mean squared / absolute error, cosine
  similarity per prompt averaged, histogram), ``Token Diff`` (each step's maximum logit against the reference's,
  over the first 16 prompts); lmmbench adds the first diverging token of each;
* an OpenAI-compatible endpoint (``--url``): ByteMLPerf's PPL where the server scores prompts, and lmmbench's
  top-k measures (``topk_logprob_max_diff``, ``topk_logprob_cosine``, ``logprob_diff``); ByteMLPerf's logits and
  token diffs are null with the reason, since a server returns no logits (``http``).

The report is ByteMLPerf's ``report.json`` with its ``Accuracy`` section; the histograms, ``token_diff.csv``
and ``per_prompt.csv`` are written beside it, and ``run.json`` like every run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lmmbench.core.environment import cpu_name
from lmmbench.core.errors import UserError
from lmmbench.evaluation.reference.config import CompareConfig, DumpConfig
from lmmbench.evaluation.reference.prompts import load_prompts, prompt_counts
from lmmbench.evaluation.reference.report import engine_section, http_section, summary_line, write_run_log

__all__ = ["compare_reference", "dump_reference", "http_accuracy", "load_prompts", "read_reference", "summary_line"]

FORMAT = 3  # reference.json's layout: every prompt's free-running trace with top-k log-probabilities


def _engine(name: str, model: str, device: str, dtype: str, threads: int | None) -> Any:
    import torch

    from lmmbench.engines.engine_registry import ENGINES

    if threads is not None:
        torch.set_num_threads(threads)
    return ENGINES.get(name)(model, device, dtype)


def _prompt_ids(tok: Any, prompt: str) -> list[int]:
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    ids = list(tok.encode(prompt, add_special_tokens=False))
    return [int(prefix), *ids] if prefix is not None and (not ids or ids[0] != prefix) else ids


def _texts(tok: Any, top: list[list[Any]]) -> list[list[Any]]:
    """Each top-k entry with its token's text (how a server that returns text keys names it)."""
    return [[tid, lp, tok.decode([tid])] for tid, lp in top]


def dump_reference(cfg: DumpConfig) -> Path:
    """Write ``reference.json`` and ``reference.npz`` under ``cfg.out``."""
    import numpy as np
    import torch

    from lmmbench.evaluation.reference.trace import engine_trace

    if cfg.out.exists() and not cfg.out.is_dir():  # before the model loads
        raise UserError(f"--out {cfg.out}: a file; give a folder for reference.json and reference.npz")
    prompts = load_prompts(cfg.prompts, cfg.num_prompts)
    counts = prompt_counts(len(prompts), cfg.num_prompts, cfg.token_diff_prompts)
    engine = _engine(cfg.engine, cfg.model, cfg.device, cfg.dtype, cfg.threads)
    records, firsts = [], []
    with torch.inference_mode():
        for prompt in prompts:
            ids = _prompt_ids(engine.tokenizer, prompt)
            t = engine_trace(engine, ids, cfg.max_new_tokens, cfg.top_k)  # every prompt: ByteMLPerf's PPL
            firsts.append(t.first_logits)
            records.append({"prompt": prompt, "prompt_ids": ids, "ppl": t.ppl, "prompt_logprobs": t.prompt_logprobs,
                            "generated_ids": t.generated_ids,
                            "max_logits": t.max_logits,
                            "top_logprobs": [_texts(engine.tokenizer, s) for s in t.top]})  # fmt: skip
    cfg.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cfg.out / "reference.npz", first_token_logits=np.stack(firsts))
    device = getattr(engine, "device", None)
    dtype = getattr(getattr(engine, "model", None), "dtype", None)
    meta = {"format": FORMAT, "model": cfg.model, "engine": cfg.engine, "device": str(device),
            "dtype": str(dtype).removeprefix("torch."), "host": cpu_name(), "max_new_tokens": cfg.max_new_tokens,
            "top_k": cfg.top_k, "prompts_source": cfg.prompts, "counts": counts, "prompts": records}  # fmt: skip
    path = cfg.out / "reference.json"
    path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return path


def read_reference(folder: Path) -> tuple[dict[str, Any], Any]:
    """``reference.json`` and the reference's first-token logits, or one clear error."""
    import numpy as np

    meta_path, npz_path = folder / "reference.json", folder / "reference.npz"
    if not meta_path.is_file() or not npz_path.is_file():
        raise UserError(f"{folder}: no reference.json / reference.npz; run `lmmbench reference dump` first")
    import zipfile
    import zlib

    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        with np.load(npz_path) as npz:
            ref_first = npz["first_token_logits"]
    except (json.JSONDecodeError, KeyError, ValueError, OSError, UnicodeDecodeError, zipfile.BadZipFile, EOFError,
            zlib.error, RecursionError) as exc:  # a truncated or corrupt file among them
        raise UserError(f"{folder}: unreadable reference ({type(exc).__name__}: {exc}); run `lmmbench reference "
                        "dump` again") from None  # fmt: skip
    if getattr(ref_first, "ndim", 0) != 2:
        raise UserError(f"{npz_path}: first_token_logits is not a (prompts, vocabulary) array; run `lmmbench "
                        "reference dump` again")  # fmt: skip
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UserError(f"{folder}: a reference of another layout (an older lmmbench's); run `lmmbench reference "
                        "dump` again")  # fmt: skip
    return meta, ref_first


def _compare_engine(cfg: CompareConfig, meta: dict[str, Any], ref_first: Any) -> tuple[dict[str, Any], str]:
    """Every reference prompt through the engine under test; the Accuracy section and the Backend label."""
    import torch

    from lmmbench.evaluation.reference.trace import engine_trace

    assert cfg.model is not None
    engine = _engine(cfg.engine, cfg.model, cfg.device, cfg.dtype, cfg.threads)
    vocab = int(engine.model.get_output_embeddings().weight.shape[0]) if hasattr(engine, "model") else None
    if vocab is not None and ref_first.shape[1] != vocab:
        raise UserError(f"{cfg.reference}: reference vocabulary {ref_first.shape[1]} != model's {vocab}; "
                        "not the same model")  # fmt: skip
    traces = []
    with torch.inference_mode():
        for rec in meta["prompts"]:  # each generates as long as the reference did, as ByteMLPerf's backends do
            steps = max(len(rec["generated_ids"]), 1)
            traces.append(engine_trace(engine, rec["prompt_ids"], steps, int(meta["top_k"])))
    device = getattr(engine, "device", "?")
    dtype = str(getattr(getattr(engine, "model", None), "dtype", "?")).removeprefix("torch.")
    backend = cfg.backend_name or f"{cfg.engine}:{device}/{dtype}"
    return engine_section(cfg.out_dir, meta, ref_first, traces), backend


def http_accuracy(url: str, model: str | None, reference: Path, out_dir: Path, api_key: str | None = None
                  ) -> dict[str, Any]:  # fmt: skip
    """The Accuracy section of the server at ``url`` against ``reference`` (files written under ``out_dir``)."""
    from lmmbench.backends.readiness import wait_for_server
    from lmmbench.evaluation.reference.http import compare_http

    meta, _ref_first = read_reference(reference)
    served = model or str(meta["model"])
    wait_for_server(url, served, 10.0, api_key=api_key)  # a server still starting; one that serves another model
    token_prompts = int(meta["counts"]["token_diff"])
    cmp = compare_http(url, served, meta["prompts"], token_prompts, int(meta["top_k"]), api_key)
    return http_section(out_dir, meta, cmp)


def compare_reference(cfg: CompareConfig) -> dict[str, Any]:
    """Check the backend under test against the reference; write report.json, histograms, CSVs and run.json."""
    from lmmbench.core.clock import wall_label

    started = wall_label()
    meta, ref_first = read_reference(cfg.reference)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.url is not None:
        accuracy = http_accuracy(cfg.url, cfg.model, cfg.reference, cfg.out_dir, cfg.api_key)
        backend = cfg.backend_name or cfg.url
    else:
        accuracy, backend = _compare_engine(cfg, meta, ref_first)
    report: dict[str, Any] = {
        "Model": cfg.model or meta["model"],
        "Backend": backend,
        "Reference Backend": f"{meta.get('engine')}:{meta['device']}/{meta['dtype']}",
        "Host Info": cpu_name(),
        "Min New Tokens": meta["max_new_tokens"],  # the reference's greedy steps: every one is generated
        "Max New Tokens": meta["max_new_tokens"],
        "Accuracy": accuracy,
    }
    path = cfg.out_dir / "report.json"
    path.write_text(json.dumps(_finite(report), indent=2) + "\n", encoding="utf-8")
    write_run_log(cfg, report, started)
    report["_path"] = str(path)
    return report


def _finite(value: Any) -> Any:
    """NaN / inf as null (JSON has neither; unmeasured is null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
