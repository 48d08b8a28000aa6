"""Files of a perf run: records (JSONL + CSV), summary.csv, report.json (ByteMLPerf keys)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, TextIO

from lmmbench.core.request_records import RequestRecord
from lmmbench.metrics.perf_metrics import PerfSummary, request_values
from lmmbench.reports.json_files import json_safe, write_json

__all__ = ["RecordWriter", "bytemlperf_entry", "summary_row", "write_json"]

_CSV_SKIP = ("error_message",)


class RecordWriter:
    """Appends records to records.jsonl and records.csv, flushing after every batch."""

    def __init__(self, run_dir: Path) -> None:
        self.jsonl: TextIO = (run_dir / "records.jsonl").open("a", encoding="utf-8")
        self.csv_file: TextIO = (run_dir / "records.csv").open("a", encoding="utf-8", newline="")
        self.csv: csv.DictWriter[str] | None = None
        self.columns: list[str] = []
        csv_path = run_dir / "records.csv"
        if csv_path.stat().st_size:  # a resumed run: keep the file's header, never write a second one
            with csv_path.open(newline="", encoding="utf-8") as fh:
                self.columns = next(csv.reader(fh), [])
            self.csv = csv.DictWriter(self.csv_file, fieldnames=self.columns, extrasaction="ignore")

    def write(self, records: list[RequestRecord], point_labels: dict[str, Any]) -> None:
        """Write one point's records."""
        for rec in records:
            row = request_values(rec)
            labels = {**rec.labels, **point_labels}
            base = rec.scheduled_ns
            full = {**row, "labels": labels, "error_message": rec.error_message,
                    "chunk_ms": [round((t - base) / 1e6, 4) for t in rec.chunk_times_ns],
                    "chunk_tokens": rec.chunk_tokens}  # fmt: skip
            if rec.output_text:
                full["output_text"] = rec.output_text
            self.jsonl.write(json.dumps(json_safe(full)) + "\n")
            flat = {k: v for k, v in row.items() if k not in _CSV_SKIP}
            flat.update({f"label_{k}": v for k, v in labels.items()})
            if self.csv is None:
                self.columns = list(flat)
                self.csv = csv.DictWriter(self.csv_file, fieldnames=self.columns, extrasaction="ignore")
                self.csv.writeheader()
            self.csv.writerow(flat)
        self.jsonl.flush()
        self.csv_file.flush()

    def close(self) -> None:
        """Close both files."""
        self.jsonl.close()
        self.csv_file.close()


def summary_row(point: dict[str, Any], summary: PerfSummary) -> dict[str, Any]:
    """One flat summary.csv row: the point's settings, counts, throughputs, every metric's stats."""
    row: dict[str, Any] = dict(point)
    for key in ("requests", "ok", "errors", "not_sent", "duration_s", "send_rate_rps", "qps",
                "input_token_throughput", "output_token_throughput", "total_token_throughput",
                "goodput_qps", "slo_attainment", "new_connections"):  # fmt: skip
        row[key] = getattr(summary, key)
    row["errors_by_kind"] = ";".join(f"{k}={v}" for k, v in summary.errors_by_kind.items())
    for name, dist in summary.metrics.items():
        for stat, value in dist.to_dict().items():
            if stat != "count":
                row[f"{name}_{stat}"] = value
    return {k: json_safe(v) for k, v in row.items()}


def bytemlperf_entry(labels: dict[str, Any], summary: PerfSummary) -> dict[str, Any]:
    """A ByteMLPerf ``Performance`` entry (seconds, as ByteMLPerf reports) next to lmmbench's fields."""
    ttft, per_token = summary.metrics["ttft_ms"], summary.metrics["per_token_latency_ms"]
    entry: dict[str, Any] = json_safe({
        "TP Size": labels.get("tp", 1),
        # ByteMLPerf's Batch Size is its client count: the workload's batch unless --concurrency replaced it
        "Batch Size": labels.get("concurrency") if "concurrency" in labels.get("overridden", {})
        else labels.get("batch", labels.get("concurrency")),
        "Input Tokens": labels.get("input_tokens"),
        "First Token Latency(AVG)": ttft.mean / 1e3,
        "Per Token Latency(AVG)": per_token.mean / 1e3,
        "First Token Latency(P90)": ttft.p90 / 1e3,
        "Per Token Latency(P90)": per_token.p90 / 1e3,
        "Token Throughput": summary.output_token_throughput,
        "Request Number": summary.ok,
        "QPS": summary.qps,
        "labels": labels,
        "lmmbench": summary.to_dict(),
    })  # fmt: skip
    return entry
