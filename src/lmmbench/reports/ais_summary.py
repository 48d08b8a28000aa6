"""AISBench's accuracy summary (``summarizers/default.py`` ``DefaultSummarizer``): one table of data set,
version, metric, mode and one column per model, written to ``summary/summary_<time>.txt`` (tabulate, csv,
markdown and raw sections), ``.csv`` and ``.md``, and printed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["METRIC_WHITELIST", "summary_table", "write_summary"]

METRIC_WHITELIST = ["score", "auc_score", "accuracy", "humaneval_pass@1", "rouge1", "avg_toxicity_score",
                    "bleurt_diff", "matthews_correlation", "truth", "f1", "exact_match", "extract_rate"]  # fmt: skip
_BLACKLIST = ("bp", "sys_len", "ref_len", "type")


def _metrics(result: dict[str, Any]) -> dict[str, Any]:
    found = {k: v for k, v in result.items() if k not in _BLACKLIST and k != "details"
             and isinstance(v, (int, float, str))}  # fmt: skip
    order = sorted(found, key=lambda m: METRIC_WHITELIST.index(m) if m in METRIC_WHITELIST else len(METRIC_WHITELIST))
    return {m: found[m] for m in order}


def summary_table(models: list[str], datasets: list[tuple[str, str]],
                  results: dict[str, dict[str, dict[str, Any]]]) -> list[list[str]]:  # fmt: skip
    """The table: ``datasets`` as (abbr, version), ``results[model][abbr]`` the result files' contents."""
    parsed = {m: {d: _metrics(r) for d, r in results.get(m, {}).items() if "error" not in r} for m in models}
    metrics: dict[str, list[str]] = {}
    for m in models:
        for d, got in parsed[m].items():
            metrics.setdefault(d, list(got))
    table = [["dataset", "version", "metric", "mode", *models]]
    for abbr, version in datasets:
        if abbr not in metrics:
            table.append([abbr, "-", "-", "-", *["-"] * len(models)])
            continue
        for metric in metrics[abbr]:
            row = [abbr, version, metric, "gen"]
            for m in models:
                value = parsed[m].get(abbr, {}).get(metric)
                row.append("-" if value is None else (f"{value:.02f}" if isinstance(value, (int, float))
                                                      else str(value)))  # fmt: skip
            table.append(row)
    return table


def _md(table: list[list[str]]) -> str:
    out = "| " + " | ".join(table[0]) + " |\n" + "|" + " | ".join("-----" for _ in table[0]) + "|\n"
    return out + "".join("| " + " | ".join(row) + " |\n" for row in table[1:])


def _raw(models: list[str], results: dict[str, dict[str, dict[str, Any]]]) -> str:
    abbrs: list[str] = []
    for m in models:
        abbrs += [d for d in results.get(m, {}) if d not in abbrs]
    lines = []
    for m in models:
        lines += ["-------------------------------", f"Model: {m}"]
        for d in abbrs:
            result = {k: v for k, v in results.get(m, {}).get(d, {}).items() if k != "details"}
            lines.append(f"{d}: {result if d in results.get(m, {}) else '{}'}")
    return "\n".join(lines)


def write_summary(folder: Path, time_str: str, models: list[str], datasets: list[tuple[str, str]],
                  results: dict[str, dict[str, dict[str, Any]]]) -> tuple[Path, str]:  # fmt: skip
    """Write the three summary files; returns the .txt path and the table as AISBench prints it."""
    from lmmbench.core.errors import require

    require("tabulate", "eval")
    import tabulate

    table = summary_table(models, datasets, results)
    printed = tabulate.tabulate(table, headers="firstrow", floatfmt=".2f")
    csv = "\n".join(",".join(row) for row in table)
    md = _md(table)
    folder.mkdir(parents=True, exist_ok=True)
    txt = folder / f"summary_{time_str}.txt"
    line, divider = "^" * 128, "-" * 128 + " THIS IS A DIVIDER " + "-" * 128
    txt.write_text(f"{time_str}\ntabulate format\n{line}\n{printed}\n{'$' * 128}\n\n{divider}\n\ncsv format\n"
                   f"{line}\n{csv}\n{'$' * 128}\n\nmarkdown format\n{line}\n{md}\n{'$' * 128}\n{divider}\n\n"
                   f"raw format\n{line}\n{_raw(models, results)}\n{'$' * 128}\n", encoding="utf-8")  # fmt: skip
    (folder / f"summary_{time_str}.csv").write_text(csv + "\n", encoding="utf-8")
    (folder / f"summary_{time_str}.md").write_text(md, encoding="utf-8")
    return txt, printed + f"\n\n\nThe markdown format results is as below:\n\n{md}"
