"""``lmmbench perf recover RUN_DIR``: metrics from what a killed perf run left on disk.

After a SIGKILL (or OOM, power) a perf run folder keeps ``records.partial.jsonl`` (and, after a
later ``--overwrite``, ``records.partial.crashed-*.jsonl``): the finished requests of the point in
progress, with their instants, first-token instant and token counts. This turns them into records,
then writes ``summary.csv``, ``report.json`` and ``report.html`` next to them, marked
``"recovered": true``. Metrics that need every chunk (ITL) are absent, never guessed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmmbench.config.input_files import read_text
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import RequestRecord
from lmmbench.loadgen.journal import JOURNAL_NAME
from lmmbench.metrics.perf_metrics import summarize_records
from lmmbench.reports.bytemlperf_header import detect_hardware_type
from lmmbench.reports.perf_files import write_summary_csv
from lmmbench.reports.perf_report import bytemlperf_entry, summary_row, write_json

__all__ = ["recover_perf"]

_INSTANTS = ("scheduled_ns", "slot_ns", "sent_ns", "first_byte_ns", "first_token_ns", "end_ns")


def _record(line: dict[str, Any]) -> RequestRecord:
    rec = RequestRecord(int(line["request_id"]), worker=int(line.get("worker") or 0),
                        warmup=bool(line.get("warmup")), status=int(line.get("status") or 0),
                        error_kind=str(line.get("error_kind") or ""))  # fmt: skip
    for key in _INSTANTS:
        setattr(rec, key, int(line.get(key) or 0))
    rec.first_content_ns = rec.first_token_ns
    rec.output_tokens = int(line.get("output_tokens") or 0)
    rec.prompt_tokens = line.get("prompt_tokens")
    rec.input_tokens = line.get("input_tokens")
    rec.token_source = str(line.get("token_source") or "")
    rec.labels = dict(line.get("labels") or {})
    return rec


def _journal_lines(run_dir: Path) -> list[dict[str, Any]]:
    paths = [run_dir / JOURNAL_NAME, *sorted(run_dir.glob("records.partial.crashed-*.jsonl"))]
    lines: list[dict[str, Any]] = []
    for path in (p for p in paths if p.is_file()):
        for raw in read_text(path, "journal").splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:  # the torn last line of a crash mid-write
                continue
            if isinstance(obj, dict) and "request_id" in obj and "first_token_ns" in obj:
                lines.append(obj)
    return lines


def recover_perf(run_dir: Path) -> list[Path]:
    """Write summary.csv, report.json and report.html of ``run_dir`` from its journal(s); returns them."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run folder")
    lines = _journal_lines(run_dir)
    if not lines:
        raise UserError(f"{run_dir}: no {JOURNAL_NAME} with first-token instants to recover from "
                        f"(a run that ended normally has its files already)")  # fmt: skip
    info = json.loads(read_text(run_dir / "run.json", "run.json")) if (run_dir / "run.json").is_file() else {}
    slo = (info.get("config") or {}).get("slo") or {}
    points: dict[str, list[RequestRecord]] = {}
    for line in lines:
        points.setdefault(json.dumps(line.get("labels") or {}, sort_keys=True), []).append(_record(line))
    rows, perf = [], []
    for key, records in points.items():
        labels = {**json.loads(key), "recovered": True}
        summary = summarize_records(records, slo)
        rows.append(summary_row(labels, summary))
        perf.append(bytemlperf_entry(labels, summary))
    summary_path = write_summary_csv(run_dir / "summary.csv", rows)
    report = write_json(run_dir / "report.json", {
        "schema_version": 1, "Model": (info.get("config") or {}).get("model"), "Backend": detect_hardware_type(),
        "recovered": True, "recovered_requests": len(lines), "Performance": perf,
    })  # fmt: skip
    facts = {**(info.get("run") or {}), "status": "recovered", "requests_measured": len(lines)}
    write_json(run_dir / "run.json", {**info, "status": "recovered", "run": facts})  # the run log, now "recovered"
    from lmmbench.reports.html_report import write_reports

    return [summary_path, report, *write_reports("perf", run_dir)]
