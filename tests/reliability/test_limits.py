"""The bounds table: documented in full, raisable by environment variable and by --limit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lmmbench.config.limits import LIMITS, limit_value
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def test_every_bound_is_in_the_docs_table_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(\w+)` \| (\d+) \| `LMMBENCH_LIMIT_\w+` \|", DOC.read_text(), re.MULTILINE))
    assert rows == {name: str(lim.default) for name, lim in LIMITS.items()}


def test_a_bound_is_raised_by_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMMBENCH_LIMIT_CONCURRENCY", "8")
    with pytest.raises(UserError, match="LMMBENCH_LIMIT_CONCURRENCY"):
        PerfConfig(concurrency=9)
    monkeypatch.setenv("LMMBENCH_LIMIT_CONCURRENCY", "9")
    assert PerfConfig(concurrency=9).concurrency == 9
    monkeypatch.setenv("LMMBENCH_LIMIT_CONCURRENCY", "lots")
    with pytest.raises(UserError, match="whole number"):
        limit_value("concurrency")


def test_the_limit_option_raises_a_bound_for_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from lmmbench.cli.main import main

    monkeypatch.delenv("LMMBENCH_LIMIT_CONCURRENCY", raising=False)
    argv = ["perf", "--url", "http://127.0.0.1:9", "--wait-for-server", "0", "--concurrency", "200000",
            "--out-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 2 and "limit concurrency=100000" in capsys.readouterr().err
    assert main(["--limit", "concurrency=200000", *argv]) == 2  # now it gets past the bound, to the server
    assert "cannot reach" in capsys.readouterr().err
    monkeypatch.delenv("LMMBENCH_LIMIT_CONCURRENCY", raising=False)
