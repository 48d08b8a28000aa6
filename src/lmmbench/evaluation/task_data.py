"""Reading task samples from local files: jsonl, json, csv, parquet, or a `datasets` folder."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.datasets.json_lines import read_json_lines
from lmmbench.evaluation.task_config import DataSource, TaskConfig

__all__ = ["load_samples"]


def _detect(path: Path) -> str:
    if path.is_dir():
        return "hf_disk"
    suffix = path.suffix.lower()
    return {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(suffix, "jsonl")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, row in read_json_lines(path):
        if not isinstance(row, dict):
            raise UserError(f"{path}:{i}: expected a JSON object per line")
        rows.append(row)
    return rows


def _read_json(path: Path) -> list[dict[str, Any]]:
    from lmmbench.config.input_files import load_json, read_text

    data = load_json(read_text(path, "JSON data file"), path)
    if isinstance(data, dict):
        for key in ("data", "samples", "rows"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise UserError(f"{path}: expected a list of objects (or {{'data': [...]}})")
    return data


def _read_csv(path: Path) -> list[dict[str, Any]]:
    import io

    from lmmbench.config.input_files import read_text

    text = read_text(path, "CSV data file")
    try:
        return [dict(r) for r in csv.DictReader(io.StringIO(text, newline=""))]
    except csv.Error as exc:
        hint = "; raise with LMMBENCH_LIMIT_CSV_FIELD_BYTES if it is real" if "field limit" in str(exc) else ""
        raise UserError(f"{path}: not valid CSV ({exc}){hint}") from None


def _plain(value: Any) -> Any:
    """A pandas / numpy cell as the Python value `datasets` hands out (NaN -> None)."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    return None if isinstance(value, float) and value != value else value


def _read_csv_typed(path: Path) -> list[dict[str, Any]]:
    """A csv with pandas' type inference, as lm-eval's `datasets` csv loader reads it."""
    try:
        import pandas as pd
    except ImportError:
        raise UserError(f"{path}: reading this csv needs pandas: pip install pandas") from None
    frame = pd.read_csv(path)
    return [{str(k): _plain(v) for k, v in r.items()} for r in frame.to_dict(orient="records")]


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pandas as pd
    except ImportError:
        raise UserError(f"{path}: reading parquet needs pandas and pyarrow: pip install pandas pyarrow") from None
    try:
        frame = pd.read_parquet(path)
    except ImportError as exc:
        raise UserError(f"{path}: reading parquet needs pyarrow: pip install pyarrow ({exc})") from None
    return [dict(r) for r in frame.to_dict(orient="records")]


def _read_hf_disk(path: Path, split: str | None) -> list[dict[str, Any]]:
    try:
        import datasets  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        raise UserError(
            f"{path}: a saved `datasets` folder needs the 'datasets' package: pip install datasets"
        ) from None
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            split = "test" if "test" in ds else next(iter(ds))
        if split not in ds:
            raise UserError(f"{path}: no split '{split}'; splits: {', '.join(ds)}")
        ds = ds[split]
    return [dict(r) for r in ds]


def read_source(src: DataSource, base: TaskConfig) -> list[dict[str, Any]]:
    """Rows of one data source, relative paths resolved against the task file."""
    path = base.resolve(src.path)
    if not path.exists():
        raise UserError(f"{base.source_file}: data.path: {path} does not exist")
    fmt = _detect(path) if src.format == "auto" else src.format
    try:
        if fmt == "jsonl":
            rows = _read_jsonl(path)
        elif fmt == "json":
            rows = _read_json(path)
        elif fmt == "csv":
            rows = _read_csv(path)
        elif fmt == "csv_typed":
            rows = _read_csv_typed(path)
        elif fmt == "parquet":
            rows = _read_parquet(path)
        else:
            rows = _read_hf_disk(path, src.split)
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    if src.limit is not None:
        rows = rows[: src.limit]
    if not rows:
        raise UserError(f"{path}: no samples")
    return rows


def load_samples(task: TaskConfig) -> list[dict[str, Any]]:
    """The task's samples as a list of dicts, in file order."""
    return read_source(task.data, task)
