"""The charts of ``final_report.md`` as PNG files beside it (VLMHyperBench's ReportGenerator: a Markdown
report with matplotlib charts): accuracy per row and task metric, and TTFT against load of perf rows, the
same data the HTML report draws inline. Without matplotlib (``lmmbench[plots]``) no PNG is drawn and the
report says so; a number a row did not measure is left out, never drawn as zero.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ACCURACY_PNG", "TTFT_PNG", "write_report_charts"]

ACCURACY_PNG = "final_report_accuracy.png"
TTFT_PNG = "final_report_ttft.png"


def write_report_charts(accuracy: tuple[list[str], dict[str, list[float | None]]],
                        curves: dict[str, list[tuple[float, float]]],
                        plan_dir: Path) -> list[tuple[str, str]] | None:  # fmt: skip
    """Draw the charts that have data into ``plan_dir``; returns (title, file name) of each one drawn, or
    None when matplotlib is not installed. ``accuracy`` is (metric keys, row label -> value per key)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn: list[tuple[str, str]] = []
    keys, series = accuracy
    if keys and series:
        title = "Accuracy per row and task metric"
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(keys) * max(1, len(series)) / 2 + 3), 4.5))
        width = 0.8 / len(series)
        for i, (label, values) in enumerate(series.items()):
            xs = [k + i * width for k, v in enumerate(values) if v is not None]
            ax.bar(xs, [v for v in values if v is not None], width=width, label=label)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys, rotation=20, ha="right")
        ax.set_ylabel("score")
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plan_dir / ACCURACY_PNG, dpi=100)
        plt.close(fig)
        drawn.append((title, ACCURACY_PNG))
    if curves:
        title = "TTFT against load"
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, pts in curves.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xlabel("offered load (req/s or concurrency)")
        ax.set_ylabel("mean TTFT (ms)")
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plan_dir / TTFT_PNG, dpi=100)
        plt.close(fig)
        drawn.append((title, TTFT_PNG))
    return drawn
