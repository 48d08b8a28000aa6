"""PNG plots of a perf run (matplotlib, Agg): latency CDFs, throughput/latency against load, TTFT vs input."""

from __future__ import annotations

from pathlib import Path

from lmmbench.core.request_records import RequestRecord
from lmmbench.metrics.perf_metrics import PerfSummary, itl_ms, request_values

__all__ = ["PLOTS_NOTE", "plot_run"]

PLOTS_NOTE = "plots skipped: matplotlib is not installed (pip install 'lmmbench[plots]')"


def plot_run(run_dir: Path, points: list[tuple[str, list[RequestRecord], PerfSummary, float]]) -> list[Path]:
    """Write the plots; ``points`` is (label, records, summary, load) per point. Returns the files."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    files: list[Path] = []
    # the per-request numbers of each point's measured, successful requests, computed once
    ok_values = [[request_values(r) for r in recs if r.ok and not r.warmup] for _l, recs, _s, _load in points]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for (name, key), ax in zip([("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl"), ("E2E", "e2e_ms")],
                               axes.flat, strict=False):  # fmt: skip
        for (label, recs, _summary, _load), values in zip(points, ok_values, strict=True):
            if key == "itl":
                vals = sorted(x for r in recs if r.ok and not r.warmup for x in itl_ms(r))
            else:
                vals = sorted(v[key] for v in values if v[key] is not None)
            if vals:
                ys = [(i + 1) / len(vals) for i in range(len(vals))]
                ax.plot(vals, ys, label=label)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests" if key != "itl" else "fraction of tokens")
        ax.grid(alpha=0.3)
        if len(points) <= 8:
            ax.legend(fontsize=7)
    fig.suptitle("latency CDFs (from the scheduled time)")
    fig.tight_layout()
    files.append(run_dir / "latency_cdf.png")
    fig.savefig(files[-1], dpi=100)
    plt.close(fig)
    if len(points) > 1:
        loads = [p[3] for p in points]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        a1.plot(loads, [p[2].output_token_throughput for p in points], "o-", label="output tok/s")
        a1.set_ylabel("output tokens/s")
        a1b = a1.twinx()
        a1b.plot(loads, [p[2].qps for p in points], "s--", color="tab:orange", label="QPS")
        a1b.set_ylabel("requests/s")
        a1.set_xlabel("load (rate req/s or concurrency)")
        for stat in ("p50", "p90", "p99"):
            a2.plot(loads, [p[2].metrics["ttft_ms"].percentiles[stat] for p in points], "o-", label=f"TTFT {stat}")
            a2.plot(loads, [p[2].metrics["tpot_ms"].percentiles[stat] for p in points], "x--", label=f"TPOT {stat}")
        a2.set_xlabel("load (rate req/s or concurrency)")
        a2.set_ylabel("ms")
        a2.legend(fontsize=7)
        for a in (a1, a2):
            a.grid(alpha=0.3)
        fig.tight_layout()
        files.append(run_dir / "load_curves.png")
        fig.savefig(files[-1], dpi=100)
        plt.close(fig)
    xs, ys = [], []
    for values in ok_values:
        for v in values:
            if v["ttft_ms"] is not None and (v["prompt_tokens"] or v["input_tokens"]):
                xs.append(v["prompt_tokens"] or v["input_tokens"])
                ys.append(v["ttft_ms"])
    if xs:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter(xs, ys, s=6, alpha=0.5)
        ax.set_xlabel("input tokens")
        ax.set_ylabel("TTFT (ms)")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        files.append(run_dir / "ttft_vs_input.png")
        fig.savefig(files[-1], dpi=100)
        plt.close(fig)
    return files
