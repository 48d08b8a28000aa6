"""The Accuracy section of ByteMLPerf's report.json from a reference comparison, its files (histograms,
``token_diff.csv``, ``per_prompt.csv``) and the run log. Unmeasured values are null, never 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmmbench.evaluation.reference.bytemlperf_metrics import logits_diff, prompt_ppl, token_diff, topk_first_step

__all__ = ["engine_section", "http_section", "record_ppl", "summary_line", "write_run_log"]

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


def _divergences(meta: dict[str, Any], traces: list[Any]) -> list[dict[str, Any]]:
    """lmmbench's own: per token-diff prompt, the first step whose generated token differs from the reference's."""
    out: list[dict[str, Any]] = []
    for i in range(min(int(meta["counts"]["token_diff"]), len(traces))):
        ref, here = meta["prompts"][i], traces[i]
        for s, (a, b) in enumerate(zip(here.generated_ids, ref["generated_ids"], strict=False)):
            if a != int(b):
                out.append({"prompt": i, "step": s, "generated": a, "reference": int(b)})
                break
    return out


def record_ppl(rec: dict[str, Any]) -> float | None:
    """ByteMLPerf's PPL of a reference prompt (its prompt log-probs and its greedy steps' chosen log-probs)."""
    return prompt_ppl([float(x) for x in rec["prompt_logprobs"]], [float(t[0][1]) for t in rec["top_logprobs"]])


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
    """The Accuracy section of an in-process comparison under ByteMLPerf's names and definitions
    (``bytemlperf_metrics``), its histograms and CSVs."""
    import numpy as np

    here = np.stack([t.first_logits.astype("float64") for t in traces])
    ref = ref_first[: len(traces)].astype("float64")
    all_d = (ref - here).ravel()
    n_token = int(meta["counts"]["token_diff"])
    token, token_diffs = token_diff([t.max_logits for t in traces[:n_token]],
                                    [[float(x) for x in r["max_logits"]] for r in meta["prompts"][:n_token]],
                                    limit=n_token)  # fmt: skip
    all_t = [x for td in token_diffs for x in td]
    _histogram(all_d, out_dir / "logits_diff.png", "first-token logits diff", "diff value")
    _histogram(all_t, out_dir / "token_diff.png", "per-step max-logit diff", "diff value")
    (out_dir / "token_diff").mkdir(exist_ok=True)
    for i, td in enumerate(token_diffs):  # ByteMLPerf draws the token diff of each prompt
        _histogram(td, out_dir / "token_diff" / f"prompt_{i}.png", f"prompt {i}: per-step max-logit diff",
                   "diff value")  # fmt: skip
    ppl = [prompt_ppl(t.prompt_logprobs, [float(top[0][1]) for top in t.top]) for t in traces]
    rows = [{"prompt": i, "ppl": ppl[i], "ref_ppl": record_ppl(meta["prompts"][i]),
             "first_logits_max_abs_diff": float(np.abs(ref[i] - here[i]).max()),
             "token_max_abs_diff": max(token_diffs[i], default=None) if i < len(token_diffs) else None}
            for i in range(len(traces))]  # fmt: skip
    _write_tables(out_dir, token_diffs, rows)
    logits = {**logits_diff(here, ref), "Png": str(out_dir / "logits_diff.png")}
    return {
        "PPL": ppl,
        "Reference PPL": [r["ref_ppl"] for r in rows],
        "Token Diff": {**token, "Png": str(out_dir / "token_diff.png"),
                       "Prompt Pngs": str(out_dir / "token_diff" / "prompt_<i>.png"), "Steps Compared": len(all_t),
                       "First Divergence": _divergences(meta, traces)},
        "Logits Diff": logits,
        "Prompt Counts": _counts(meta),
    }


_HTTP_NULL = {
    "Logits Diff": "a server returns top-k log-probabilities, not full-vocabulary logits: ByteMLPerf's logits diff "
                   "needs an in-process engine (reference compare --engine); topk_logprob_max_diff and "
                   "topk_logprob_cosine compare what the server returns",
    "Token Diff": "ByteMLPerf's token diff compares each step's largest logit, which a server does not return; "
                  "logprob_diff.per_step compares the top-k log-probabilities while the tokens agree",
}  # fmt: skip


def http_section(out_dir: Path, meta: dict[str, Any], cmp: Any) -> dict[str, Any]:
    """The Accuracy section of a server (log-probabilities only): ByteMLPerf's PPL where the server scores prompts,
    its logits and token diffs null with the reason, lmmbench's top-k measures under their own names."""
    first = [h - r for p in cmp.first_pairs for h, r in p]
    steps = [x for s in cmp.steps for x in s]
    if first or steps:
        _histogram(first + steps, out_dir / "logprob_diff.png", f"top-{meta['top_k']} log-prob diff",
                   "diff value")  # fmt: skip
    topk = topk_first_step(cmp.first_pairs)
    reasons = dict(_HTTP_NULL)
    if cmp.ppls is None:
        reasons["PPL"] = "the server does not score prompts (echo + logprobs on /v1/completions)"
    return {
        "PPL": cmp.ppls, "Reference PPL": [record_ppl(r) for r in meta["prompts"]], "Logits Diff": None,
        "Token Diff": None, "null_reason": reasons,
        "topk_logprob_max_diff": topk["topk_logprob_max_diff"], "topk_logprob_cosine": topk["topk_logprob_cosine"],
        "logprob_diff": {
            "k": int(meta["top_k"]),
            "first_step": {"prompts": topk["prompts"], "values_compared": len(first), **_stats(first)},
            "per_step": {"prompts": len(cmp.steps), "values_compared": len(steps), **_stats(steps),
                          "first_divergence": cmp.divergences},
            "png": str(out_dir / "logprob_diff.png") if (first or steps) else None,
        },
        "Prompt Counts": _counts(meta),
        "note": "over HTTP: PPL is ByteMLPerf's (per prompt, averaged over the generated steps) from the server's "
                "prompt log-probabilities (echo) and its generated tokens' log-probabilities; "
                "topk_logprob_max_diff / topk_logprob_cosine are lmmbench's, over the first step's tokens both "
                "top-k lists hold (cosine per prompt, averaged)",
    }


def summary_line(report: dict[str, Any]) -> str:
    """One line of a comparison's result, for the terminal."""
    acc = report["Accuracy"]
    if acc.get("Logits Diff") is not None:
        ld, td = acc["Logits Diff"], acc["Token Diff"]
        return (f"logits max diff {ld['Max Difference']:.3g}, cosine {ld['Cosine Similarity']}; token max diff "
                f"{td['Max Difference']}; first divergences {len(td['First Divergence'])}")  # fmt: skip
    lp = acc["logprob_diff"]
    return (f"top-{lp['k']} log-probs: cosine {acc['topk_logprob_cosine']}, first token max diff "
            f"{lp['first_step']['max_abs_diff']}, per token max diff {lp['per_step']['max_abs_diff']}; first "
            f"divergences {len(lp['per_step']['first_divergence'])}")


def write_run_log(cfg: Any, report: dict[str, Any], started: str) -> None:
    """run.json of a reference comparison (indexed in the run store like every run)."""
    from lmmbench.core.clock import wall_label
    from lmmbench.core.environment import capture_environment
    from lmmbench.core.runs.log import Outcome, RunLog, measurement_from, new_run_id, write_run_log

    acc = report["Accuracy"]
    if acc.get("Logits Diff") is not None:
        headline = {"logits_max_abs_diff": acc["Logits Diff"]["Max Difference"],
                    "logits_cosine": acc["Logits Diff"]["Cosine Similarity"],
                    "logits_mse": acc["Logits Diff"]["Mean Squared Error"],
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
