"""Runs by the names users gave them: `runs compare NAME1 NAME2` with perf `--run-name` names, the newest
run of a name with a note naming the others, `runs show` by name, and a store written by an older lmmbench
(SQLAlchemy's schema, no name index) read and migrated in place. Real perf runs against `lmmbench testserver`."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.core.runs.store import SCHEMA_VERSION, RunStore
from lmmbench.testing import running_testserver


def _perf(url: str, out: Path, name: str) -> str:
    assert main(["perf", "--url", url, "--model", "test-model", "--concurrency", "2", "--num-requests", "20",
                 "--input-tokens", "16", "--output-tokens", "2", "--no-plots", "--no-progress", "--out-dir",
                 str(out), "--run-name", name]) == 0  # fmt: skip
    return str(json.loads((out / "perf" / name / "run.json").read_text())["run_id"])


def test_runs_compare_takes_the_names_given_with_run_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite'}")
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=1)) as url:
        x1 = _perf(url, tmp_path / "a", "x1")
        x2 = _perf(url, tmp_path / "a", "x2")
        capsys.readouterr()
        assert main(["runs", "compare", "x1", "x2"]) == 0
        out = capsys.readouterr().out
        assert f"A (baseline): {x1}" in out and x2 in out and "ttft_ms" in out
        newer = _perf(url, tmp_path / "b", "x1")  # a second run named x1, in another folder
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="lmmbench.runs"):
        assert main(["runs", "show", "x1"]) == 0
    assert newer in capsys.readouterr().out  # the newest run of the name
    assert any(x1 in r.getMessage() and "2 runs" in r.getMessage() for r in caplog.records)  # the other is named
    assert main(["runs", "show", "no-such-name"]) == 2
    assert "run id, id prefix, run folder or run name" in capsys.readouterr().err


def test_a_store_of_the_older_schema_is_read_and_migrated_in_place(tmp_path: Path) -> None:
    """The table layout SQLAlchemy created in earlier lmmbench versions (no name index): rows stay readable
    by name, and the index lmmbench now keeps is added."""
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE runs (run_id VARCHAR(200) NOT NULL PRIMARY KEY, kind VARCHAR(32), name VARCHAR(300), "
        "model VARCHAR(500), labels_json TEXT, started_at VARCHAR(40), finished_at VARCHAR(40), path VARCHAR(2000), "
        "interrupted BOOLEAN, ok INTEGER, failed INTEGER, git_commit VARCHAR(64), host VARCHAR(300), "
        "headline_json TEXT);"
        "CREATE INDEX ix_runs_kind ON runs (kind);"
        "CREATE TABLE run_metrics (run_id VARCHAR(200), metric VARCHAR(300), value FLOAT);"
        "INSERT INTO runs VALUES ('perf-20250101-000000-aaaa', 'perf', 'nightly', 'm', '{}', '2025-01-01T00:00:00Z', "
        "'2025-01-01T00:10:00Z', '/tmp/x', 0, 10, 0, NULL, 'h', '{\"qps\": 3.5}');"
    )
    con.commit()
    con.close()
    store = RunStore.open(f"sqlite:///{path}")
    assert store.get("nightly").headline == {"qps": 3.5}
    con = sqlite3.connect(path)
    indexes = {r[1] for r in con.execute("PRAGMA index_list('runs')")}
    assert "ix_runs_name" in indexes
    assert con.execute("SELECT value FROM lmmbench_store WHERE key = 'schema_version'").fetchone() == (
        str(SCHEMA_VERSION),)  # fmt: skip
    con.close()
    store = RunStore.open(f"sqlite:///{path}")  # opened again: nothing left to migrate, the row still there
    assert [r.name for r in store.list()] == ["nightly"]
