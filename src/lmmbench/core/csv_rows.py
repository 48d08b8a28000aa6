"""Rows of a results CSV that may have been written in pieces: a header line repeated further down (old and
new results concatenated with ``cat``) starts a section read under that header, so today's columns are
never read under an old file's names. Standard library only."""

from __future__ import annotations

import csv
import io

__all__ = ["csv_rows"]


def _is_header(cells: list[str], header: list[str]) -> bool:
    """A line that names columns rather than holding values: at least half of its cells, and two of them (one
    in a one-column file), are names of the header in force (in any order: the pieces of a concatenation may
    order their columns differently)."""
    shared = len(set(cells) & set(header))
    return shared >= min(2, len(header)) and 2 * shared >= len(cells)


def csv_rows(text: str) -> list[dict[str, str]]:
    """Every data row of ``text`` as ``column -> cell`` (missing cells empty, extra cells dropped), each under
    the header line above it."""
    header: list[str] = []
    out: list[dict[str, str]] = []
    for cells in csv.reader(io.StringIO(text, newline="")):
        if not cells:
            continue
        if not header or _is_header(cells, header):
            header = cells
            continue
        out.append({name: cells[i] if i < len(cells) else "" for i, name in enumerate(header)})
    return out
