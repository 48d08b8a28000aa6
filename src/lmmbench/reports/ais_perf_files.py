"""AISBench's perf files under ``performances/<model>/``, written and read as AISBench 3.1 lays them out.

Followed (read, not copied), AISBench/benchmark as of 2026-08:
``openicl/icl_inferencer/output_handler/base_handler.py`` (``run_cache_consumer`` / ``write_to_json``: in perf mode
every request, failed ones too, is a line of ``<data set>_details.jsonl`` — ``data_abbr``, ``id``, then the
request's ``Output`` fields, then ``db_name`` — and a failed one also a line of ``<data set>_failed.jsonl``; numpy
arrays such as ``time_points`` are replaced by ``{"__db_ref__": <row id>}`` into the SQLite file
``db_data/<db_name>``), ``output_handler/db_utils.py`` (table ``numpy_store(id, arr_blob)``, each array as
``np.save`` bytes), ``models/output.py`` (``RequestOutput``'s fields), ``summarizers/default_perf.py``
(``<data set>.json`` with ``indent=4``, ``<data set>.csv``, the tables printed with tabulate's ``fancy_grid``)
and ``calculators/base_perf_metric_calculator.py`` (``_export_to_csv``: header ``Performance Parameters, Stage``,
the statistics, ``N``).
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.jsonl import jsonl_values

__all__ = ["read_details", "write_details", "write_perf_results"]

DB_DIR = "db_data"


def _blob(values: list[float]) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.array(values, dtype=np.float64), allow_pickle=False)
    return buf.getvalue()


def write_details(out_dir: Path, lines: list[tuple[dict[str, Any], list[float]]]) -> None:
    """Append every request's details line (``time_points`` stored in a new ``db_data/<8 hex>.db``) to
    ``<data_abbr>_details.jsonl``, and each failed one to ``<data_abbr>_failed.jsonl``."""
    db_name = f"{uuid.uuid4().hex[:8]}.db"
    (out_dir / DB_DIR).mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(out_dir / DB_DIR / db_name)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS numpy_store (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                     "arr_blob BLOB NOT NULL)")  # fmt: skip
        for line, points in lines:
            cur = conn.execute("INSERT INTO numpy_store (arr_blob) VALUES (?)", (sqlite3.Binary(_blob(points)),))
            line["time_points"] = {"__db_ref__": cur.lastrowid}
            line["db_name"] = db_name
            abbr = str(line["data_abbr"])
            with (out_dir / f"{abbr}_details.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
            if not line["success"]:
                failed = {"data_abbr": abbr, "id": line["id"], "input": line["input"], "error_info": line["error_info"]}
                with (out_dir / f"{abbr}_failed.jsonl").open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(failed, ensure_ascii=False) + "\n")
        conn.commit()
    finally:
        conn.close()


def _arrays(db: Path) -> dict[int, list[float]]:
    import numpy as np

    if not db.is_file():
        return {}
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT id, arr_blob FROM numpy_store").fetchall()
    except sqlite3.Error as exc:
        raise UserError(f"{db}: not AISBench's numpy store ({exc})") from None
    finally:
        conn.close()
    return {int(i): [float(x) for x in np.load(io.BytesIO(b), allow_pickle=False)] for i, b in rows}


def read_details(out_dir: Path, abbrs: list[str]) -> list[dict[str, Any]]:
    """Every details line of the data sets ``abbrs``, ``time_points`` resolved from ``db_data/`` (None where the
    array is missing, as when AISBench was killed before committing)."""
    lines: list[dict[str, Any]] = []
    for abbr in abbrs:
        path = out_dir / f"{abbr}_details.jsonl"
        if not path.is_file():
            continue
        lines.extend(jsonl_values(path))
    if not lines:
        raise UserError(f"no {'/'.join(abbrs)}_details.jsonl under {out_dir}: nothing to summarise (run --mode perf "
                        "first, or --reuse the folder that holds it)")
    dbs: dict[str, dict[int, list[float]]] = {}
    for line in lines:
        ref = line.get("time_points")
        if isinstance(ref, dict) and "__db_ref__" in ref:
            name = str(line.get("db_name"))
            if name not in dbs:
                dbs[name] = _arrays(out_dir / DB_DIR / name)
            line["time_points"] = dbs[name].get(int(ref["__db_ref__"]))
    return lines


def _table(csv_rows: list[list[str]], common: dict[str, dict[str, Any]]) -> str:
    from lmmbench.core.errors import require

    require("tabulate", "eval")
    import tabulate

    common_rows: list[list[Any]] = [["Common Metric", "Stage", "Value"]]
    common_rows += [[k, stage, v] for k, stages in common.items() for stage, v in stages.items()]
    return "\n".join(str(tabulate.tabulate(t, headers="firstrow", tablefmt="fancy_grid", floatfmt=".2f",
                                           numalign="center", stralign="left", missingval="N/A"))
                     for t in (csv_rows, common_rows))  # fmt: skip


def write_perf_results(out_dir: Path, name: str, metrics: dict[str, dict[str, dict[str, Any]]],
                       common: dict[str, dict[str, Any]]) -> str:  # fmt: skip
    """``<name>.json`` (common metrics) and ``<name>.csv`` (request metrics); returns the printed tables."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(common, indent=4, ensure_ascii=False), encoding="utf-8")
    first = next(iter(metrics.values()))
    stages = list(first)
    headers = list(first[stages[0]])
    rows = [["Performance Parameters", "Stage", *headers]]
    rows += [[metric, stage, *[str(values[stage].get(h, "")) for h in headers]]
             for metric, values in metrics.items() for stage in stages]  # fmt: skip
    with (out_dir / f"{name}.csv").open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    return _table(rows, common)
