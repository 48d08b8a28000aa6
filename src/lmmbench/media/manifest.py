"""The manifest CSV: one row per sample, media paths relative to the CSV, extra columns carried along.

Columns: ``id``, ``video``, ``image``, ``audio`` (paths relative to the CSV file, any may be
empty), ``prompt``; any other column is kept in ``ManifestRow.extra`` and copied into results.
A missing column, a duplicate id or a missing / empty media file raises ``UserError`` naming
the file and the row. Whether a file decodes is checked when the row is measured (a corrupt
file then fails that row only, with its reason recorded).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from lmmbench.core.errors import UserError

__all__ = ["MEDIA_COLUMNS", "REQUIRED_COLUMNS", "ManifestRow", "load_manifest", "write_manifest"]

MEDIA_COLUMNS = ("video", "image", "audio")
REQUIRED_COLUMNS = ("id", *MEDIA_COLUMNS, "prompt")


@dataclass(frozen=True)
class ManifestRow:
    """One sample of a manifest; media paths are absolute (resolved against the CSV)."""

    id: str
    prompt: str
    video: Path | None = None
    image: Path | None = None
    audio: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)
    line: int = 0

    @property
    def modalities(self) -> str:
        """A short label such as ``video+audio`` or ``text``."""
        parts = [name for name in MEDIA_COLUMNS if getattr(self, name) is not None]
        return "+".join(parts) if parts else "text"


def _media_path(csv_path: Path, line: int, column: str, raw: str) -> Path | None:
    raw = raw.strip()
    if not raw:
        return None
    path = Path(raw)
    if not path.is_absolute():
        path = (csv_path.parent / path).resolve()
    if not path.is_file():
        raise UserError(f"{csv_path}:{line}: {column} file not found: {path}; fix the path (relative to the CSV)")
    if path.stat().st_size == 0:
        raise UserError(f"{csv_path}:{line}: {column} file is empty: {path}; replace it or drop the row")
    return path


def load_manifest(path: str | Path) -> list[ManifestRow]:
    """Read and check a manifest CSV; bad input raises ``UserError`` naming the file and row."""
    csv_path = Path(path)
    if not csv_path.is_file():
        raise UserError(f"manifest not found: {csv_path}; pass --manifest PATH or omit it for the synthetic set")
    from lmmbench.config.input_files import read_text

    text = read_text(csv_path, "manifest")
    reader = csv.DictReader(text.splitlines())
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        hint = "; raise with LMMBENCH_LIMIT_CSV_FIELD_BYTES if it is real" if "field limit" in str(exc) else ""
        raise UserError(f"{csv_path}: not valid CSV ({exc}){hint}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise UserError(
            f"{csv_path}: missing column(s) {', '.join(missing)}; the header must have "
            f"{', '.join(REQUIRED_COLUMNS)} (media columns may be left empty)"
        )
    rows: list[ManifestRow] = []
    seen: set[str] = set()
    for line, raw_row in enumerate(reader, start=2):
        rec = {(k or "").strip(): (v or "") for k, v in raw_row.items() if k is not None}
        sample_id = rec["id"].strip()
        if not sample_id:
            raise UserError(f"{csv_path}:{line}: empty id; give every row a unique id")
        if sample_id in seen:
            raise UserError(f"{csv_path}:{line}: duplicate id '{sample_id}'; ids must be unique")
        seen.add(sample_id)
        media = {c: _media_path(csv_path, line, c, rec[c]) for c in MEDIA_COLUMNS}
        extra = {k: v for k, v in rec.items() if k not in REQUIRED_COLUMNS}
        rows.append(
            ManifestRow(
                id=sample_id,
                prompt=rec["prompt"],
                video=media["video"],
                image=media["image"],
                audio=media["audio"],
                extra=extra,
                line=line,
            )
        )
    if not rows:
        raise UserError(f"{csv_path}: the manifest has no rows; add at least one sample")
    return rows


def write_manifest(path: Path, rows: list[dict[str, str]]) -> Path:
    """Write manifest rows (dicts with the required columns and any extras) as CSV."""
    extras: list[str] = []
    for row in rows:
        extras.extend(k for k in row if k not in REQUIRED_COLUMNS and k not in extras)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*REQUIRED_COLUMNS, *extras])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in [*REQUIRED_COLUMNS, *extras]})
    return path
