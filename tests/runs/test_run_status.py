"""The run log's top-level ``status``: written by every run, read from logs that kept it elsewhere or not at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lmmbench.core.runs.log import RunLog, load_run_log, write_run_log

FIXTURES = Path(__file__).parent / "fixtures"


def _log(**kw: object) -> RunLog:
    return RunLog.model_validate({"run_id": "eval-20260101-000000-abcd", "kind": "eval", "name": "r", **kw})


def test_a_log_written_at_the_start_and_finished_in_place_says_complete(tmp_path: Path) -> None:
    log = _log()
    write_run_log(tmp_path, log, index=False)
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "running"
    log.finished_at = "2026-01-01T00:01:00Z"
    write_run_log(tmp_path, log, index=False)
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "complete"
    log.outcome.interrupted = True
    log.status = "running"
    write_run_log(tmp_path, log, index=False)
    assert load_run_log(tmp_path).status == "interrupted"


def test_a_status_the_run_set_is_kept(tmp_path: Path) -> None:
    log = _log(finished_at="2026-01-01T00:01:00Z", status="failed")
    write_run_log(tmp_path, log, index=False)
    assert load_run_log(tmp_path).status == "failed"


def test_older_logs_read_their_status_from_the_run_section_or_their_outcome(tmp_path: Path) -> None:
    # a schema-2 perf log written before the top-level field: its status sat in "run"
    old = {"schema_version": 2, "run_id": "perf-20260101-000000-abcd", "kind": "perf", "name": "p",
           "finished_at": "2026-01-01T00:01:00Z", "run": {"status": "recovered", "points": []}}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(old))
    assert load_run_log(tmp_path).status == "recovered"
    # an unversioned perf log (no status anywhere): it finished, so complete
    folder = tmp_path / "v0"
    folder.mkdir()
    shutil.copy(FIXTURES / "perf_v0_run.json", folder / "run.json")
    assert load_run_log(folder).status == "complete"
    # a status this schema does not know is read as unset, then settled from the log
    assert _log(status="paused").status == "running"
