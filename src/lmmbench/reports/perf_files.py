"""The files of a perf run that are rewritten after each point: summary.csv, report.json and run.json
(records go through ``perf_report.RecordWriter``), so an interrupted run keeps everything measured."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lmmbench.core.clock import wall_label
from lmmbench.core.environment import capture_environment
from lmmbench.core.request_records import RequestRecord
from lmmbench.core.runs.log import RunLog, write_run_log
from lmmbench.core.runs.summaries import perf_headline
from lmmbench.loadgen.api import LoadResult
from lmmbench.loadgen.journal import JOURNAL_NAME
from lmmbench.metrics.perf_metrics import PerfSummary, summarize_records
from lmmbench.reports.bytemlperf_header import ReportHeader
from lmmbench.reports.perf_report import RecordWriter, bytemlperf_entry, summary_row, write_json

__all__ = ["PerfFiles", "point_load", "point_name", "write_summary_csv"]


def write_summary_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """summary.csv: one row per point, the union of the rows' columns in first-seen order."""
    cols = list(dict.fromkeys(c for row in rows for c in row))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return path


def point_load(labels: dict[str, Any]) -> float:
    """A point's load: its rate, else its concurrency (the x axis of the plots)."""
    return float(labels["rate"] if labels.get("rate") is not None else labels.get("concurrency") or 0)


def point_name(labels: dict[str, Any]) -> str:
    """A point's name in the plots: ``rate 4`` or ``conc 8``."""
    return f"rate {labels['rate']:g}" if labels.get("rate") is not None else f"conc {labels.get('concurrency')}"


class PerfFiles:
    """A perf run's rows (summary.csv), ByteMLPerf entries (report.json), points for the plots, run log."""

    def __init__(self, run_dir: Path, model: str | None) -> None:
        self.run_dir = run_dir
        self.writer = RecordWriter(run_dir)
        self.rows: list[dict[str, Any]] = []
        self.perf: list[dict[str, Any]] = []
        self.points: list[tuple[str, list[RequestRecord], PerfSummary, float]] = []
        self.env = capture_environment()
        self.extra: dict[str, Any] = {}
        self.model = model
        self.header = ReportHeader(host_info=str(self.env["cpu"]))  # report.json's top, as ByteMLPerf's reporter
        self.accuracy: dict[str, Any] | None = None  # ByteMLPerf's Accuracy section, when the run checked it

    def keep(self, rows: list[dict[str, Any]], perf: list[dict[str, Any]], model: str | None,
             records: dict[int, list[RequestRecord]], slo: dict[str, float]) -> None:  # fmt: skip
        """Start from the points a resumed run already measured (rows and entries as written)."""
        self.rows, self.perf, self.model = list(rows), list(perf), model or self.model
        for _point, recs in sorted(records.items()):
            labels = recs[0].labels if recs else {}
            self.points.append((point_name(labels), recs, summarize_records(recs, slo), point_load(labels)))

    def add(self, labels: dict[str, Any], res: LoadResult) -> None:
        """One measured point: its records appended, its row and entry added, every file rewritten."""
        self.model = res.model
        self.writer.write(res.records, labels)
        (self.run_dir / JOURNAL_NAME).unlink(missing_ok=True)  # its requests are in records.jsonl now
        self.rows.append(summary_row(labels, res.summary))
        self.perf.append(bytemlperf_entry(labels, res.summary))
        self.points.append((point_name(labels), res.records, res.summary, point_load(labels)))
        self.flush()

    def flush(self) -> None:
        """Rewrite summary.csv (every row, the union of their columns) and report.json."""
        if self.rows:
            write_summary_csv(self.run_dir / "summary.csv", self.rows)
        out_tokens = [p["labels"].get("output_tokens") for p in self.perf]
        write_json(self.run_dir / "report.json", {  # ByteMLPerf's keys in its order, then lmmbench's
            **self.header.fields(self.model, out_tokens), "Accuracy": self.accuracy,
            "Performance": self.perf if self.header.perf_tested else None, "schema_version": 1,
            "lmmbench": self.header.lmmbench(self.model), **self.extra,
        })  # fmt: skip

    def close(self) -> None:
        """Close the record files."""
        self.writer.close()

    def run_log(self, run_log: RunLog, *, finished: bool, interrupted: bool, index: bool = False) -> None:
        """Write run.json (the run log) now; at the end with counts, headline and files, and indexed."""
        ok = sum(int(r.get("ok") or 0) for r in self.rows)
        by_kind: dict[str, int] = {}
        for p in self.perf:
            for kind, n in p["lmmbench"].get("errors_by_kind", {}).items():
                by_kind[kind] = by_kind.get(kind, 0) + int(n)
        run_log.model = self.model
        run_log.outcome = run_log.outcome.model_validate({
            "ok": ok if self.rows else None, "failed": sum(by_kind.values()) if self.rows else None,
            "interrupted": interrupted, "failures_by_kind": by_kind,
            "not_sent": sum(int(r.get("not_sent") or 0) for r in self.rows) if self.rows else None,
        })  # fmt: skip
        run_log.headline = perf_headline(self.rows)
        if self.extra.get("search"):
            run_log.run["search"] = self.extra["search"]
        if finished:
            run_log.finished_at = wall_label()
            run_log.files = sorted(str(p.relative_to(self.run_dir)) for p in self.run_dir.iterdir() if p.is_file())
        write_run_log(self.run_dir, run_log, index=index)
