"""`envs list` / `envs prune` on broken venvs (bad input round 5): a marker that is a list or holds a number where
a string belongs is listed as broken and pruned, a symlinked entry is removed as a link (its target stays) and
reported only once gone, a stray file is removed with its lock files; `LMMBENCH_HOME` naming a file is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.executors.venv_cache import MARKER, list_venvs, prune_venvs, venvs_dir


def _venv(venvs: Path, key: str, marker: object) -> None:
    (venvs / key / "bin").mkdir(parents=True)
    (venvs / key / MARKER).write_text(json.dumps(marker))
    (venvs / f"{key}.lock").write_text("")


def test_broken_markers_links_and_stray_files_are_listed_and_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LMMBENCH_HOME", str(home))
    venvs = venvs_dir(home)
    venvs.mkdir(parents=True)
    _venv(venvs, "good", {"requirements": ["x==1"], "python": "3.11"})
    _venv(venvs, "a-list", ["not", "an", "object"])
    _venv(venvs, "number", {"requirements": ["x"], "python": 3.11})
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    (venvs / "linked").symlink_to(target)
    (venvs / "stray").write_text("not a venv")
    (venvs / "stray.lock").write_text("")
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    for key in ("a-list", "number", "linked", "stray"):
        line = next(x for x in out.splitlines() if x.split()[:1] == [key])
        assert "broken" in line, line
    broken = {e.key for e in list_venvs(home) if e.problem}
    assert broken == {"a-list", "number", "linked", "stray"}
    result = prune_venvs(home, keep=5)
    assert {e.key for e in result.removed} == broken
    left = sorted(p.name for p in venvs.iterdir())
    assert left == ["good", "good.lock"], left  # the lock files of the removed went with them
    assert (target / "keep.txt").read_text() == "mine"  # a link is removed, never what it points at


def test_lmmbench_home_naming_a_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("LMMBENCH_HOME", str(tmp_path / "f"))
    assert main(["envs", "list"]) == 2
    err = capsys.readouterr().err
    assert "LMMBENCH_HOME" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv", [["envs", "prune", "--keep", "all"], ["envs", "purge"], ["perf", "--no-such-flag"]])
def test_a_usage_error_is_one_line_not_typers_block(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "--help" in lines[0], err
