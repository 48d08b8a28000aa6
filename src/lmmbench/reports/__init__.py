"""Writers of a run's files: results CSV (appended as measured), summary, analysis, plot, run.json."""

from lmmbench.reports.analysis import build_analysis
from lmmbench.reports.json_files import write_json
from lmmbench.reports.results_csv import ResultsCsv, numeric, read_rows
from lmmbench.reports.run_info import run_record
from lmmbench.reports.summary import describe, per_sample_medians, write_summary

__all__ = [
    "ResultsCsv",
    "build_analysis",
    "describe",
    "numeric",
    "per_sample_medians",
    "read_rows",
    "run_record",
    "write_json",
    "write_summary",
]
