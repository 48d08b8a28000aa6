"""The results CSV: one row per measurement, appended and flushed as it is measured; resumable."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["ResultsCsv", "numeric", "read_rows"]

log = logging.getLogger(__name__)


def numeric(value: Any) -> float:
    """A float from a CSV cell (NaN for empty or non-numeric cells)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except (TypeError, ValueError):
        return math.nan


def read_rows(path: Path) -> list[dict[str, str]]:
    """Every row of a results CSV (empty list when the file does not exist); rows of TTFT breakdowns
    written before the study's names were kept come in today's names (``core.ttft_names``)."""
    if not path.is_file():
        return []
    from lmmbench.config.input_files import read_text
    from lmmbench.core.csv_rows import csv_rows
    from lmmbench.core.ttft_names import upgrade_breakdown_row

    return [upgrade_breakdown_row(r) for r in csv_rows(read_text(path, "results file"))]


def _drop_torn_last_line(path: Path, text: str) -> str:
    """A row cut by a kill (no final newline) is removed from the file, once, before resuming."""
    if not text or text.endswith("\n"):
        return text
    kept = text[: text.rfind("\n") + 1]
    log.warning("%s: removed a half-written last row (a run killed mid-write)", path)
    with path.open("r+", encoding="utf-8", newline="") as fh:
        fh.truncate(len(kept.encode("utf-8")))
    return kept


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else ""
    return "" if value is None else value


class ResultsCsv:
    """Appends rows under a fixed header; with ``resume`` an existing file is kept and extended."""

    def __init__(self, path: Path, columns: list[str], resume: bool = False) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        existing: list[dict[str, str]] = []
        if resume and path.is_file():
            from lmmbench.config.input_files import read_text

            text = _drop_torn_last_line(path, read_text(path, "results file"))
            reader = csv.DictReader(io.StringIO(text, newline=""))
            try:
                existing = list(reader)
            except csv.Error as exc:
                raise UserError(f"{path}: not a readable CSV ({exc}); use another --out-dir or --overwrite") from None
            header = list(reader.fieldnames or [])
            missing = [c for c in columns if c not in header]
            if header and missing:
                raise UserError(
                    f"{path}: cannot resume, the file lacks column(s) {', '.join(missing[:5])}; "
                    "use another --out-dir or run without --resume"
                )
            self.columns = header or columns
        else:
            self.columns = columns
        self.done = {(r.get("sample_id", ""), int(numeric(r.get("repeat")))) for r in existing
                     if r.get("status") == "ok" and not math.isnan(numeric(r.get("repeat")))}
        new_file = not (resume and path.is_file() and path.stat().st_size > 0)
        self._fh = path.open("w" if new_file else "a", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._fh, fieldnames=self.columns, extrasaction="ignore")
        if new_file:
            self._writer.writeheader()
            self._flush()

    def _flush(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, row: dict[str, Any]) -> None:
        """Write one row and flush it to disk."""
        self._writer.writerow({k: _cell(row.get(k)) for k in self.columns})
        self._flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> ResultsCsv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
