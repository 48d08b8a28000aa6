"""The run store as bad input (docs/reliability.md, "Run store"): a store that is not a database, holds another
program's table, was written by a newer lmmbench, is a folder, or has a URL lmmbench cannot open is one line
naming the store (and, for a file, how to move it aside), exit 2 within 5 s; a corrupt row is skipped with a
warning; a command that writes a run keeps its run and says indexing failed. Real SQLite files throughout; the
database drivers of other stores are not installed here, which is itself one of the cases."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.core.runs.log import RunLog
from lmmbench.core.runs.store import SCHEMA_VERSION, RunStore


def _garbage(p: Path) -> str:
    p.write_bytes(b"this is not a database, it only ends in .sqlite\n" * 20)
    return f"sqlite:///{p}"


def _foreign(p: Path) -> str:
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, speed REAL)")  # another program's 'runs'
    con.commit()
    con.close()
    return f"sqlite:///{p}"


def _newer(p: Path) -> str:
    RunStore.open(f"sqlite:///{p}")
    con = sqlite3.connect(p)
    con.execute("UPDATE lmmbench_store SET value = :v WHERE key = 'schema_version'", {"v": str(SCHEMA_VERSION + 7)})
    con.commit()
    con.close()
    return f"sqlite:///{p}"


STORES = {  # id -> (how the store is made, words the one error line holds)
    "not-a-database": (_garbage, "move it aside (mv "),
    "foreign-runs-table": (_foreign, "not lmmbench's"),
    "newer-schema": (_newer, "written by a newer lmmbench"),
    "a-folder": (lambda p: (p.mkdir(), f"sqlite:///{p}")[1], "is a folder"),
    "unknown-scheme": (lambda p: "bogus://host/db", "not a database URL"),
    "not-a-url": (lambda p: "just words", "not a database URL"),
    "missing-driver": (lambda p: "postgresql://user@127.0.0.1:1/db", "driver"),
}


#: A bad store is refused within this many times the same command on a good store (one connection and a query:
#: a PostgreSQL driver's connection retries or a lock wait would take seconds against milliseconds; measured at most
#: 4 times here, at load 7).
BAD_STORE_BUDGET_CALIBRATIONS = 50


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(STORES))
def test_a_bad_run_store_is_one_line_naming_it_and_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, words = STORES[case]
    url = make(tmp_path / "runs.sqlite")
    # no retrying or waiting on a bad store: it is refused within a budget scaled by this run's calibration, the
    # same command on a good (new, empty) store, so a loaded machine slows both alike
    good = f"sqlite:///{tmp_path / 'good.sqlite'}"
    start = time.perf_counter_ns()
    assert main(["runs", "list", "--store", good]) == 0
    calibration_ns = time.perf_counter_ns() - start
    capsys.readouterr()
    for argv in (["runs", "list", "--store", url], ["runs", "show", "anything", "--store", url]):
        start = time.perf_counter_ns()
        assert main(argv) == 2
        took_ns = time.perf_counter_ns() - start
        assert took_ns < BAD_STORE_BUDGET_CALIBRATIONS * calibration_ns, (took_ns, calibration_ns)
        text = capsys.readouterr().err
        err = [line for line in text.splitlines() if line.startswith("error:")]
        shown = re.sub(r"//[^/@]*@", "//***@", url)  # a URL's user info is credentials: masked in every line
        assert len(err) == 1 and words in err[0] and shown in err[0] and "Traceback" not in text, text


def _log(i: int) -> RunLog:
    return RunLog(run_id=f"perf-2026010{i}-000000-abc{i}", kind="perf", name=f"n{i}", model="m",
                  started_at=f"2026-01-0{i}T00:00:00Z", finished_at=f"2026-01-0{i}T00:01:00Z",
                  headline={"qps": float(i)})  # fmt: skip


def test_a_corrupt_row_is_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.sqlite"
    store = RunStore.open(f"sqlite:///{path}")
    for i in (1, 2):
        store.index(_log(i), tmp_path / f"run{i}")
    con = sqlite3.connect(path)
    con.execute("UPDATE runs SET headline_json = '{\"qps\": 1.0, trunc' WHERE name = 'n1'")
    con.commit()
    con.close()
    runs = RunStore.open(f"sqlite:///{path}").list()
    assert [r.name for r in runs] == ["n2"]
    assert any("perf-20260101-000000-abc1" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_a_command_that_writes_a_run_keeps_it_and_says_indexing_failed(
    fuzz_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("LMMBENCH_STORE_URL", _garbage(store))
    before = store.read_bytes()
    assert main(["perf", "--url", fuzz_url, "--num-requests", "2", "--output-tokens", "2", "--no-plots",
                 "--no-progress", "--out-dir", str(tmp_path / "o"), "--run-name", "kept"]) == 0  # fmt: skip
    run_json = tmp_path / "o" / "perf" / "kept" / "run.json"
    assert json.loads(run_json.read_text())["outcome"]["ok"] == 2
    warned = [r.getMessage() for r in caplog.records if "not indexed" in r.getMessage()]
    assert warned and str(store) in warned[0], [r.getMessage() for r in caplog.records]
    assert store.read_bytes() == before, "the store the user has is left as it was"
