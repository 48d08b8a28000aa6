"""The joined table of a plan: one row per plan row, its status and flat metrics (CSV and HTML).

Columns: the row's identity (name, kind, model, executor, status, attempts, wall_s, folder, error)
then every metric any row reported, in first-seen order; a metric a row did not measure is an
empty cell, never a zero.
"""

from __future__ import annotations

import csv
import html
from pathlib import Path
from typing import Any

__all__ = ["IDENTITY_COLUMNS", "plan_table", "write_plan_summary"]

IDENTITY_COLUMNS = ("name", "kind", "model", "executor", "status", "attempts", "wall_s", "folder", "error")


def plan_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Flatten result dicts (``metrics`` inlined) into columns and rows."""
    columns = list(IDENTITY_COLUMNS)
    flat: list[dict[str, Any]] = []
    for r in rows:
        row = {k: r.get(k) for k in IDENTITY_COLUMNS}
        for key, value in (r.get("metrics") or {}).items():
            if key not in columns:
                columns.append(key)
            row[key] = value
        flat.append(row)
    return columns, flat


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_plan_summary(rows: list[dict[str, Any]], plan_dir: Path, title: str) -> tuple[Path, Path]:
    """Write ``plan_summary.csv`` and ``plan_summary.html`` into ``plan_dir``; returns both paths."""
    columns, flat = plan_table(rows)
    csv_path = plan_dir / "plan_summary.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        w.writerows({k: _cell(v) for k, v in r.items()} for r in flat)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join(
        f"<tr class=\"{html.escape(str(r.get('status')))}\">"
        + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in flat
    )  # fmt: skip
    html_path = plan_dir / "plan_summary.html"
    html_path.write_text(
        f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;"
        "font-size:13px}tr.failed{background:#fdd}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><table><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"
        "</body></html>\n",
        encoding="utf-8",
    )
    return csv_path, html_path
