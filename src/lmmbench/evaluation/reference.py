"""Reference comparison (ByteMLPerf's accuracy check): first-token logits diff, per-token top-logit diff, perplexity.

``dump_reference`` generates greedily from N prompts, then runs one teacher-forced forward over
prompt + generated tokens and saves the first generated position's full logits and the top logit of
every generated position. ``compare_reference`` replays the same token sequences on another device
or dtype (teacher-forced, so positions always align even when the argmax would differ), and writes
ByteMLPerf's ``report.json`` Accuracy section with ``logits_diff.png`` and ``token_diff.png``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.environment import cpu_name
from lmmbench.core.errors import UserError
from lmmbench.datasets.json_lines import read_json_lines
from lmmbench.evaluation.reference_config import CompareConfig, DumpConfig

__all__ = ["compare_reference", "dump_reference", "load_prompts"]


def load_prompts(source: str, n: int) -> list[str]:
    """Prompts from a task (its rendered contexts) or a .txt / .jsonl file."""
    p = Path(source).expanduser()
    if p.suffix == ".txt":
        if not p.is_file():
            raise UserError(f"{p}: prompt file not found")
        from lmmbench.config.input_files import read_text

        prompts = [line.rstrip("\n") for line in read_text(p, "prompt file").splitlines() if line.strip()]
    elif p.suffix == ".jsonl":
        if not p.is_file():
            raise UserError(f"{p}: prompt file not found")
        prompts = []
        for i, row in read_json_lines(p):
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                raise UserError(f"{p}:{i}: expected an object with a string 'prompt'")
            prompts.append(row["prompt"])
    else:
        from lmmbench.evaluation.runner import build_jobs
        from lmmbench.evaluation.task_registry import resolve_task

        jobs = build_jobs(resolve_task(source), "reference")
        prompts = [str(j.row["prompt"]) or (j.rolling or "") for j in jobs]
    prompts = [x for x in prompts if x][:n]
    if not prompts:
        raise UserError(f"{source}: no prompts")
    return prompts


def _teacher_forced(loaded: Any, prompt_ids: list[int], gen_ids: list[int]) -> tuple[Any, list[float], float]:
    """(first generated position's logits, top logit per generated step, prompt perplexity)."""
    import torch
    import torch.nn.functional as F

    seq = prompt_ids + gen_ids[:-1]
    with torch.no_grad():
        logits = loaded.model(torch.tensor([seq], device=loaded.device)).logits[0].float()
    start = len(prompt_ids) - 1
    steps = logits[start : start + len(gen_ids)]
    first = steps[0].cpu()
    tops = [float(x) for x in steps.max(dim=-1).values.cpu()]
    if len(prompt_ids) > 1:
        lp = F.log_softmax(logits[: len(prompt_ids) - 1], dim=-1)
        tgt = torch.tensor(prompt_ids[1:], device=lp.device).unsqueeze(-1)
        ppl = math.exp(-float(lp.gather(1, tgt).mean()))
    else:
        ppl = float("nan")
    return first, tops, ppl


def _load(model: str, device: str, dtype: str, threads: int | None) -> Any:
    import torch

    from lmmbench.models import load_model

    if threads is not None:
        torch.set_num_threads(threads)
    return load_model(model, device=device, dtype=dtype)


def _prompt_ids(loaded: Any, prompt: str) -> list[int]:
    tok = loaded.tokenizer
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    ids = list(tok.encode(prompt))
    return [int(prefix), *ids] if not ids or ids[0] != prefix else ids


def dump_reference(cfg: DumpConfig) -> Path:
    """Write ``reference.json`` and ``reference.npz`` under ``cfg.out``."""
    import numpy as np
    import torch

    prompts = load_prompts(cfg.prompts, cfg.num_prompts)
    loaded = _load(cfg.model, cfg.device, cfg.dtype, cfg.threads)
    records = []
    firsts = []
    for prompt in prompts:
        ids = _prompt_ids(loaded, prompt)
        with torch.no_grad():
            out = loaded.model.generate(
                torch.tensor([ids], device=loaded.device),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=loaded.device),
                max_new_tokens=cfg.max_new_tokens,
                min_new_tokens=cfg.max_new_tokens,
                do_sample=False,
                pad_token_id=int(loaded.tokenizer.eos_token_id),
            )
        gen = [int(x) for x in out[0, len(ids) :]]
        first, tops, ppl = _teacher_forced(loaded, ids, gen)
        firsts.append(first.numpy())
        records.append({"prompt": prompt, "prompt_ids": ids, "generated_ids": gen, "top_logits": tops, "ppl": ppl})
    cfg.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cfg.out / "reference.npz", first_token_logits=np.stack(firsts))
    meta = {
        "model": cfg.model,
        "device": str(loaded.device),  # resolved (--device/--dtype may be auto)
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "host": cpu_name(),
        "max_new_tokens": cfg.max_new_tokens,
        "prompts": records,
    }
    path = cfg.out / "reference.json"
    path.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return path


def _histogram(values: Any, path: Path, title: str, xlabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(values, bins=50)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("frequency")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@dataclass
class _Comparison:
    """The per-prompt differences between this stack and the reference."""

    logit_diffs: list[Any] = field(default_factory=list)  # first-token logits, here - reference
    token_diffs: list[list[float]] = field(default_factory=list)  # per generated token, top logit here - reference
    ppls: list[float] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)  # per_prompt.csv
    cosine: float = float("nan")  # of all first-token logits, here vs reference


def _read_reference(cfg: CompareConfig) -> tuple[dict[str, Any], Any]:
    """``reference.json`` and the reference's first-token logits, or one clear error."""
    import numpy as np

    meta_path = cfg.reference / "reference.json"
    npz_path = cfg.reference / "reference.npz"
    if not meta_path.is_file() or not npz_path.is_file():
        raise UserError(f"{cfg.reference}: no reference.json / reference.npz; run `lmmbench reference dump` first")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        ref_first = np.load(npz_path)["first_token_logits"]
    except (json.JSONDecodeError, KeyError, ValueError, OSError) as exc:
        raise UserError(f"{cfg.reference}: unreadable reference ({exc})") from None
    return meta, ref_first


def _compare_prompts(loaded: Any, meta: dict[str, Any], ref_first: Any) -> _Comparison:
    """Teacher-force every reference prompt here and diff its logits against the reference's."""
    import numpy as np

    out = _Comparison()
    cos_num = cos_a = cos_b = 0.0
    for i, rec in enumerate(meta["prompts"]):
        first, tops, ppl = _teacher_forced(loaded, rec["prompt_ids"], rec["generated_ids"])
        here = first.numpy().astype("float64")
        ref = ref_first[i].astype("float64")
        d = here - ref
        out.logit_diffs.append(d)
        cos_num += float((here * ref).sum())
        cos_a += float((here * here).sum())
        cos_b += float((ref * ref).sum())
        td = [a - b for a, b in zip(tops, rec["top_logits"], strict=True)]
        out.token_diffs.append(td)
        out.ppls.append(ppl)
        out.rows.append(
            {
                "prompt": i,
                "ppl": ppl,
                "ref_ppl": rec["ppl"],
                "first_logits_max_abs_diff": float(np.abs(d).max()),
                "token_max_abs_diff": max(abs(x) for x in td),
            }
        )
    out.cosine = cos_num / math.sqrt(cos_a * cos_b) if cos_a > 0 and cos_b > 0 else float("nan")
    return out


def _write_diff_files(out_dir: Path, cmp: _Comparison, all_d: Any, all_t: Any) -> None:
    """The two histograms, token_diff.csv and per_prompt.csv."""
    _histogram(all_d, out_dir / "logits_diff.png", "first-token logits diff", "diff value")
    _histogram(all_t, out_dir / "token_diff.png", "per-token top-logit diff", "diff value")
    with (out_dir / "token_diff.csv").open("w", encoding="utf-8") as fh:
        fh.write("prompt,step,diff\n")
        for i, td in enumerate(cmp.token_diffs):
            for s, x in enumerate(td):
                fh.write(f"{i},{s},{x!r}\n")
    with (out_dir / "per_prompt.csv").open("w", encoding="utf-8") as fh:
        fh.write("prompt,ppl,ref_ppl,first_logits_max_abs_diff,token_max_abs_diff\n")
        for r in cmp.rows:
            fh.write(
                ",".join(
                    repr(r[k]) for k in ("prompt", "ppl", "ref_ppl", "first_logits_max_abs_diff", "token_max_abs_diff")
                )
                + "\n"
            )


def _accuracy_section(cfg: CompareConfig, meta: dict[str, Any], cmp: _Comparison, all_d: Any, all_t: Any
                      ) -> dict[str, Any]:  # fmt: skip
    """The report's ``Accuracy`` section (ByteMLPerf's layout)."""
    import numpy as np

    return {
        "PPL": cmp.ppls,
        "Reference PPL": [r["ppl"] for r in meta["prompts"]],
        "Token Diff": {
            "Prompt Num": len(cmp.token_diffs),
            "Max Difference": float(np.abs(all_t).max()) if all_t.size else 0.0,
            "Png": str(cfg.out_dir / "token_diff.png"),
        },
        "Logits Diff": {
            "Prompt Num": len(cmp.logit_diffs),
            "Max Difference": float(np.abs(all_d).max()),
            "Mean Squared(MSE)": float((all_d**2).mean()),
            "Mean Absolute(MAE)": float(np.abs(all_d).mean()),
            "Cosine Similarity": cmp.cosine,
            "Png": str(cfg.out_dir / "logits_diff.png"),
        },
    }


def compare_reference(cfg: CompareConfig) -> dict[str, Any]:
    """Replay the reference here; write report.json, logits_diff.png, token_diff.png, per-prompt CSVs."""
    import numpy as np

    from lmmbench.core.clock import wall_label

    started = wall_label()
    meta, ref_first = _read_reference(cfg)
    loaded = _load(cfg.model, cfg.device, cfg.dtype, cfg.threads)
    vocab = int(loaded.model.get_output_embeddings().weight.shape[0])
    if ref_first.shape[1] != vocab:
        raise UserError(
            f"{cfg.reference}: reference vocabulary {ref_first.shape[1]} != model's {vocab}; not the same model"
        )
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    cmp = _compare_prompts(loaded, meta, ref_first)
    all_d = np.concatenate(cmp.logit_diffs)
    all_t = np.array([x for td in cmp.token_diffs for x in td])
    _write_diff_files(cfg.out_dir, cmp, all_d, all_t)
    report: dict[str, Any] = {
        "Model": cfg.model,
        "Backend": cfg.backend_name or f"{loaded.device}/{str(loaded.dtype).removeprefix('torch.')}",
        "Reference Backend": f"{meta['device']}/{meta['dtype']}",
        "Host Info": cpu_name(),
        "Min New Tokens": meta["max_new_tokens"],
        "Max New Tokens": meta["max_new_tokens"],
        "Accuracy": _accuracy_section(cfg, meta, cmp, all_d, all_t),
    }
    path = cfg.out_dir / "report.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _write_run_log(cfg, report, loaded, started)
    report["_path"] = str(path)
    return report


def _write_run_log(cfg: CompareConfig, report: dict[str, Any], loaded: Any, started: str) -> None:
    """run.json of a reference comparison (indexed in the run store like every run)."""
    from lmmbench.core.clock import wall_label
    from lmmbench.core.environment import capture_environment
    from lmmbench.core.run_log import Outcome, RunLog, measurement_from, new_run_id, write_run_log

    acc = report["Accuracy"]
    headline = {"logits_max_abs_diff": acc["Logits Diff"]["Max Difference"],
                "logits_cosine": acc["Logits Diff"]["Cosine Similarity"],
                "logits_mse": acc["Logits Diff"]["Mean Squared(MSE)"],
                "token_max_abs_diff": acc["Token Diff"]["Max Difference"]}  # fmt: skip
    config = cfg.model_dump(mode="json")
    device = {"device": str(loaded.device), "dtype": str(loaded.dtype).removeprefix("torch.")}
    run_log = RunLog(run_id=new_run_id("reference"), kind="reference", name=cfg.out_dir.name, model=cfg.model,
                     started_at=started, finished_at=wall_label(), config=config, environment=capture_environment(),
                     measurement=measurement_from(device, config), headline=headline,
                     outcome=Outcome(ok=acc["Logits Diff"]["Prompt Num"], failed=0, skipped=None),
                     run={"backend": report["Backend"], "reference_backend": report["Reference Backend"]},
                     files=sorted({p.name for p in cfg.out_dir.iterdir() if p.is_file()} | {"run.json"}))  # fmt: skip
    write_run_log(cfg.out_dir, run_log)
