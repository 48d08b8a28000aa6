"""``perf --resume``: continue a run folder instead of starting another one in it.

The points the earlier session finished (their rows in ``summary.csv``, their entries in
``report.json`` and their records in ``records.jsonl``) are kept as written and skipped; the point
it was measuring when it stopped is measured again: after a crash its journal is kept aside by
``perf_run_dir``; after Ctrl-C / SIGTERM (which wrote that point's partial records and row) its
records move to ``records.interrupted-point<N>.jsonl``, so no point is ever counted twice.
The plots are redrawn over every point, the kept ones rebuilt from ``records.jsonl``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.config.input_files import read_text
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import RequestRecord

__all__ = ["Previous", "load_previous", "record_from_row"]

_INSTANTS = ("scheduled_ns", "sent_ns", "first_byte_ns", "first_token_ns", "first_content_ns", "end_ns")


@dataclass
class Previous:
    """What the earlier session of a resumed run measured."""

    done: set[int] = field(default_factory=set)
    rows: list[dict[str, Any]] = field(default_factory=list)
    perf: list[dict[str, Any]] = field(default_factory=list)
    records: dict[int, list[RequestRecord]] = field(default_factory=dict)
    model: str | None = None


def record_from_row(row: dict[str, Any]) -> RequestRecord:
    """A ``RequestRecord`` rebuilt from a ``records.jsonl`` row (instants, tokens, chunk times)."""
    rec = RequestRecord(int(row["request_id"]), worker=int(row.get("worker") or 0), warmup=bool(row.get("warmup")),
                        status=int(row.get("status") or 0), error_kind=str(row.get("error_kind") or ""))  # fmt: skip
    for key in _INSTANTS:
        setattr(rec, key, int(row.get(key) or 0))
    rec.slot_ns = rec.scheduled_ns + round(float(row.get("queue_ms") or 0.0) * 1e6)
    rec.output_tokens = int(row.get("output_tokens") or 0)
    rec.prompt_tokens, rec.input_tokens = row.get("prompt_tokens"), row.get("input_tokens")
    rec.chunk_times_ns = [rec.scheduled_ns + round(float(ms) * 1e6) for ms in row.get("chunk_ms") or []]
    rec.chunk_tokens = [int(k) for k in row.get("chunk_tokens") or []]
    rec.token_source = str(row.get("token_source") or "")
    rec.labels = dict(row.get("labels") or {})
    server = {k[len("server_"):]: row[k] for k in row if k.startswith("server_") and row[k] is not None}
    rec.server_metrics = server or None  # what the response's own metrics said (lmmbench serve / proxy)
    return rec


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in read_text(path, "records file").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _set_aside(run_dir: Path, done: set[int]) -> None:
    """Move the records of points not finished (the interrupted one, or one a crash cut between its
    records and its summary row) out of records.jsonl / records.csv, into
    ``records.interrupted-point<N>.jsonl``: kept, not lost, never counted twice."""
    rows = _json_lines(run_dir / "records.jsonl")
    aside: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        point = (r.get("labels") or {}).get("point")
        if point not in done:
            aside.setdefault(str(point), []).append(r)
    if not aside:
        return
    for point, lines in aside.items():
        with (run_dir / f"records.interrupted-point{point}.jsonl").open("a", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in lines))
    kept = [r for r in rows if (r.get("labels") or {}).get("point") in done]
    (run_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    csv_path = run_dir / "records.csv"
    if csv_path.is_file():
        reader = csv.DictReader(io.StringIO(read_text(csv_path, "records.csv"), newline=""))
        keep = [r for r in reader if r.get("label_point", "").isdigit() and int(r["label_point"]) in done]
        with csv_path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=reader.fieldnames or [])
            writer.writeheader()
            writer.writerows(keep)


def load_previous(run_dir: Path, points: list[dict[str, Any]]) -> Previous:
    """The finished points of the run in ``run_dir``; refuses a run started with other points."""
    info = json.loads(read_text(run_dir / "run.json", "run.json"))
    facts = info.get("run") or {}  # the run log keeps points and status under "run"
    if json.loads(json.dumps(points, default=str)) != facts.get("points", info.get("points")):
        raise UserError(f"{run_dir}: the run was started with other load points; --resume continues the same "
                        f"run only (use --overwrite, or another --run-name)")  # fmt: skip
    prev = Previous(model=(info.get("config") or {}).get("model"))
    if (run_dir / "summary.csv").is_file():
        text = read_text(run_dir / "summary.csv", "summary.csv")
        prev.rows = [dict(r) for r in csv.DictReader(io.StringIO(text, newline=""))]
        # an interrupted run's last point stopped half-way: measure it again
        if (info.get("status") or facts.get("status")) == "interrupted" and prev.rows:
            prev.rows.pop()
        prev.done = {int(r["point"]) for r in prev.rows if str(r.get("point", "")).isdigit()}
    _set_aside(run_dir, prev.done)
    if (run_dir / "report.json").is_file():
        report = json.loads(read_text(run_dir / "report.json", "report.json"))
        prev.perf = [p for p in (report.get("Performance") or []) if (p.get("labels") or {}).get("point") in prev.done]
        prev.model = report.get("Model") or prev.model
    for row in _json_lines(run_dir / "records.jsonl"):
        point = (row.get("labels") or {}).get("point")
        if point in prev.done:
            prev.records.setdefault(int(point), []).append(record_from_row(row))
    return prev
