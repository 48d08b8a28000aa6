"""The Accuracy section of ByteMLPerf's report.json from a reference comparison, its files (histograms,
``token_diff.csv``, ``per_prompt.csv``) and the run log. Unmeasured values are null, never 0."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["engine_section", "http_section", "summary_line", "write_run_log"]

COUNTS_NOTE = "ByteMLPerf's counts: 52 prompts for perplexity and the logits diff, 16 of them for the token diff, " \
              "when that many exist; else all"  # fmt: skip


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


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"max_abs_diff": None, "mse": None, "mae": None}
    return {"max_abs_diff": max(abs(x) for x in values), "mse": sum(x * x for x in values) / len(values),
            "mae": sum(abs(x) for x in values) / len(values)}  # fmt: skip


def _counts(meta: dict[str, Any]) -> dict[str, Any]:
    return {**meta["counts"], "note": COUNTS_NOTE}


def _token_diffs(meta: dict[str, Any], traces: list[Any]) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """Per token-diff prompt, each step's max-logit difference while the tokens agree; the first divergences."""
    diffs: list[list[float]] = []
    divergences: list[dict[str, Any]] = []
    for i in range(int(meta["counts"]["token_diff"])):
        ref, here = meta["prompts"][i], traces[i]
        steps = []
        for s, top in enumerate(here.max_logits[: len(ref["max_logits"])]):
            steps.append(top - float(ref["max_logits"][s]))
            if here.generated_ids[s] != int(ref["generated_ids"][s]):
                divergences.append({"prompt": i, "step": s, "generated": here.generated_ids[s],
                                    "reference": int(ref["generated_ids"][s])})  # fmt: skip
                break
        diffs.append(steps)
    return diffs, divergences


def _write_tables(out_dir: Path, token_diffs: list[list[float]], rows: list[dict[str, Any]]) -> None:
    with (out_dir / "token_diff.csv").open("w", encoding="utf-8") as fh:
        fh.write("prompt,step,diff\n")
        for i, td in enumerate(token_diffs):
            for s, x in enumerate(td):
                fh.write(f"{i},{s},{x!r}\n")
    cols = ("prompt", "ppl", "ref_ppl", "first_logits_max_abs_diff", "token_max_abs_diff")
    with (out_dir / "per_prompt.csv").open("w", encoding="utf-8") as fh:
        fh.write(",".join(cols) + "\n")
        for r in rows:
            fh.write(",".join("" if r[k] is None else repr(r[k]) for k in cols) + "\n")


def engine_section(out_dir: Path, meta: dict[str, Any], ref_first: Any, traces: list[Any]) -> dict[str, Any]:
    """The Accuracy section of an in-process comparison (ByteMLPerf's keys), its histograms and CSVs."""
    import numpy as np

    d = [t.first_logits.astype("float64") - ref_first[i].astype("float64") for i, t in enumerate(traces)]
    here = np.stack([t.first_logits.astype("float64") for t in traces])
    ref = ref_first[: len(traces)].astype("float64")
    norm = math.sqrt(float((here * here).sum()) * float((ref * ref).sum()))
    all_d = np.concatenate(d)
    token_diffs, divergences = _token_diffs(meta, traces)
    all_t = [x for td in token_diffs for x in td]
    _histogram(all_d, out_dir / "logits_diff.png", "first-token logits diff", "diff value")
    _histogram(all_t, out_dir / "token_diff.png", "per-token max-logit diff (while tokens agree)", "diff value")
    (out_dir / "token_diff").mkdir(exist_ok=True)
    for i, td in enumerate(token_diffs):  # ByteMLPerf draws the token diff of each prompt
        _histogram(td, out_dir / "token_diff" / f"prompt_{i}.png", f"prompt {i}: per-token max-logit diff",
                   "diff value")  # fmt: skip
    rows = [{"prompt": i, "ppl": t.ppl, "ref_ppl": meta["prompts"][i]["ppl"],
             "first_logits_max_abs_diff": float(np.abs(d[i]).max()),
             "token_max_abs_diff": max((abs(x) for x in token_diffs[i]), default=None) if i < len(token_diffs)
             else None} for i, t in enumerate(traces)]  # fmt: skip
    _write_tables(out_dir, token_diffs, rows)
    token = {"Prompt Num": len(token_diffs), "Max Difference": _stats(all_t)["max_abs_diff"],
             "Png": str(out_dir / "token_diff.png"), "Prompt Pngs": str(out_dir / "token_diff" / "prompt_<i>.png"),
             "Steps Compared": len(all_t), "First Divergence": divergences}
    logits = {"Prompt Num": len(traces), "Max Difference": float(np.abs(all_d).max()),
              "Mean Squared(MSE)": float((all_d**2).mean()), "Mean Absolute(MAE)": float(np.abs(all_d).mean()),
              "Cosine Similarity": float((here * ref).sum()) / norm if norm > 0 else None,
              "Png": str(out_dir / "logits_diff.png")}
    return {
        "PPL": [t.ppl for t in traces],
        "Reference PPL": [r["ppl"] for r in meta["prompts"]],
        "Token Diff": token,
        "Logits Diff": logits,
        "Prompt Counts": _counts(meta),
    }


def http_section(out_dir: Path, meta: dict[str, Any], cmp: Any) -> dict[str, Any]:
    """The Accuracy section of a server (log-probabilities only): ``logprob_diff`` with its k, no logits diff."""
    steps = [x for s in cmp.steps for x in s]
    if cmp.first or steps:
        _histogram(cmp.first + steps, out_dir / "logprob_diff.png", f"top-{meta['top_k']} log-prob diff",
                   "diff value")  # fmt: skip
    return {
        "PPL": cmp.ppls, "Reference PPL": [r["ppl"] for r in meta["prompts"]], "Logits Diff": None,
        "Token Diff": None,
        "logprob_diff": {
            "k": int(meta["top_k"]),
            "first_step": {"prompts": cmp.first_prompts, "values_compared": len(cmp.first), **_stats(cmp.first)},
            "per_step": {"prompts": len(cmp.steps), "values_compared": len(steps), **_stats(steps),
                          "first_divergence": cmp.divergences},
            "png": str(out_dir / "logprob_diff.png") if (cmp.first or steps) else None,
        },
        "Prompt Counts": _counts(meta),
        "note": "over HTTP a server returns log-probabilities, not logits: logprob_diff compares the top-k it "
                "returns with the reference's; the logits diff and token diff need an in-process engine "
                "(reference compare --engine); PPL is the server's own scoring of each prompt (echo + logprobs), "
                "null where it returns none",
    }


def summary_line(report: dict[str, Any]) -> str:
    """One line of a comparison's result, for the terminal."""
    acc = report["Accuracy"]
    if acc.get("Logits Diff") is not None:
        ld, td = acc["Logits Diff"], acc["Token Diff"]
        return (f"logits max diff {ld['Max Difference']:.3g}, cosine {ld['Cosine Similarity']:.8f}; token max diff "
                f"{td['Max Difference']}; first divergences {len(td['First Divergence'])}")  # fmt: skip
    lp = acc["logprob_diff"]
    return (f"logprob_diff (top-{lp['k']}): first token max diff {lp['first_step']['max_abs_diff']}, per token "
            f"max diff {lp['per_step']['max_abs_diff']}; first divergences {len(lp['per_step']['first_divergence'])}")


def write_run_log(cfg: Any, report: dict[str, Any], started: str) -> None:
    """run.json of a reference comparison (indexed in the run store like every run)."""
    from lmmbench.core.clock import wall_label
    from lmmbench.core.environment import capture_environment
    from lmmbench.core.runs.log import Outcome, RunLog, measurement_from, new_run_id, write_run_log

    acc = report["Accuracy"]
    if acc.get("Logits Diff") is not None:
        headline = {"logits_max_abs_diff": acc["Logits Diff"]["Max Difference"],
                    "logits_cosine": acc["Logits Diff"]["Cosine Similarity"],
                    "logits_mse": acc["Logits Diff"]["Mean Squared(MSE)"],
                    "token_max_abs_diff": acc["Token Diff"]["Max Difference"]}  # fmt: skip
        ok = acc["Logits Diff"]["Prompt Num"]
        how = {"engine": cfg.engine, "backend": report["Backend"], "dtype": report["Backend"].rsplit("/", 1)[-1]}
    else:
        lp = acc["logprob_diff"]
        headline = {"logprob_first_max_abs_diff": lp["first_step"]["max_abs_diff"],
                    "logprob_token_max_abs_diff": lp["per_step"]["max_abs_diff"]}  # fmt: skip
        ok = lp["first_step"]["prompts"]
        how = {"url": cfg.url, "logprob_top_k": lp["k"]}
    config = cfg.model_dump(mode="json")
    out_dir = cfg.out_dir
    run_log = RunLog(run_id=new_run_id("reference"), kind="reference", name=out_dir.name, model=report["Model"],
                     started_at=started, finished_at=wall_label(), config=config, environment=capture_environment(),
                     measurement=measurement_from(how, config), headline=headline,
                     outcome=Outcome(ok=ok, failed=0, skipped=None),
                     run={"backend": report["Backend"], "reference_backend": report["Reference Backend"]},
                     files=sorted({p.name for p in out_dir.iterdir() if p.is_file()} | {"run.json"}))  # fmt: skip
    write_run_log(out_dir, run_log)
