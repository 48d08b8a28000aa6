"""The venvs kept under $LMMBENCH_HOME/venvs are bounded: `envs prune` removes the least recently used beyond the
bound or its options and keeps the ones a running row uses; `envs list` shows them; building a venv past the
`venvs_kept` bound removes the least recently used one. Every venv here is real, built by the venv executor's own
code (``ensure_venv``; no requirements, so each costs a fraction of a second) and told apart by its constraints file,
which is part of its key. Each test has its own LMMBENCH_HOME (the session's holds other tests' venvs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.executors.venv_cache import MARKER
from lmmbench.executors.venvs import ensure_venv, venv_key

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh LMMBENCH_HOME with the bounds at their defaults."""
    monkeypatch.setenv("LMMBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LMMBENCH_LIMIT_VENVS_KEPT", raising=False)
    monkeypatch.delenv("LMMBENCH_LIMIT_VENVS_BYTES", raising=False)
    yield tmp_path / "home"


def _constraints(tmp: Path, i: int) -> Path:
    """A constraints file of its own: lmmbench's, plus a comment (a venv of its own key)."""
    path = tmp / f"constraints-{i}.txt"
    path.write_text((ROOT / "constraints.txt").read_text() + f"\n# copy {i}\n")
    return path


def _build(home: Path, tmp: Path, i: int, last_used_ago_s: float | None = None) -> str:
    """Build venv ``i`` through the venv executor's code, let go of it, and optionally date its last use."""
    constraints = _constraints(tmp, i)
    venv = ensure_venv([], None, constraints, home)
    assert venv.created and venv.python.is_file()
    assert venv.lease is not None
    venv.lease.release()
    key = venv_key([], None, constraints)
    if last_used_ago_s is not None:  # the ground truth of the LRU order, injected
        t = time.time() - last_used_ago_s
        os.utime(home / "venvs" / key / MARKER, (t, t))
    return key


def _keys(home: Path) -> set[str]:
    return {p.name for p in (home / "venvs").iterdir() if p.is_dir()}


def _du_bytes(paths: list[Path]) -> int:
    """Disk usage of the paths as coreutils' du counts it (each inode once), in bytes: the independent measure."""
    out = subprocess.run(["du", "-s", "-c", "-B1", *map(str, paths)], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1].split()[0])


def _hold(root: Path) -> subprocess.Popen[str]:
    """Another process holding the venv as a running row's driver does (its lease), until its stdin closes."""
    code = ("import sys; from pathlib import Path; from lmmbench.executors.venv_cache import take_lease; "
            f"lease = take_lease(Path({str(root)!r})); print('held', flush=True); sys.stdin.read()")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_prune_removes_the_least_recently_used_beyond_keep_and_keeps_one_in_use(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oldest, b, c, newest = (_build(home, tmp_path, i, ago) for i, ago in enumerate((400, 300, 200, 100)))
    holder = _hold(home / "venvs" / oldest)
    try:
        t = time.time() - 400  # taking the lease records a use: put the oldest back where it was
        os.utime(home / "venvs" / oldest / MARKER, (t, t))
        venvs = home / "venvs"
        expected_freed = _du_bytes([p for k in (b, c) for p in venvs.glob(f"{k}*")])
        assert main(["envs", "prune", "--keep", "2", "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert f"would remove {c}" in dry and f"would remove {b}" in dry and _keys(home) == {oldest, b, c, newest}
        assert main(["envs", "prune", "--keep", "2"]) == 0
        out = capsys.readouterr().out
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    # the one in use takes one of the two places, the most recently used the other; b and c go
    assert _keys(home) == {oldest, newest}, out
    assert sorted(ln.split()[1] for ln in out.splitlines() if ln.startswith("removed ") and "venv(s)" not in ln) \
        == sorted([b, c])
    assert f"removed 2 venv(s), {expected_freed} bytes" in out and oldest in out.splitlines()[-1]
    assert not list(venvs.glob(f"{b}*")) and not list(venvs.glob(f"{c}*"))  # its lock and log files too


def test_a_worker_running_in_a_venv_holds_it_itself(home: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A row's worker runs on the venv's interpreter and holds the venv too (``hold_running_venv``, what the worker
    entry point calls first): with the driver's hold let go (a driver killed), prune still keeps it."""
    constraints = _constraints(tmp_path, 0)
    venv = ensure_venv([], None, constraints, home)
    assert venv.lease is not None
    venv.lease.release()
    key = venv_key([], None, constraints)
    code = ("import sys; from lmmbench.executors.venv_cache import hold_running_venv; "
            "lease = hold_running_venv(); print('held' if lease else 'none', flush=True); sys.stdin.read()")
    worker = subprocess.Popen([str(venv.python), "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "held"
        assert main(["envs", "prune", "--keep", "0"]) == 0
        assert _keys(home) == {key} and f"in use, kept whatever the bound: {key}" in capsys.readouterr().out
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait(timeout=30)
    assert main(["envs", "prune", "--keep", "0"]) == 0
    assert not _keys(home)


def test_older_than_removes_what_was_not_used_since(home: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    old = _build(home, tmp_path, 0, 3 * 86_400)
    recent = _build(home, tmp_path, 1, 3600)
    assert main(["envs", "prune", "--older-than", "2d"]) == 0
    assert _keys(home) == {recent} and f"removed {old}" in capsys.readouterr().out
    assert main(["envs", "prune", "--older-than", "30m"]) == 0
    assert not _keys(home)


def test_list_shows_each_venv_with_its_requirements_size_last_use_and_holder(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = _build(home, tmp_path, 0, 600)
    newer = _build(home, tmp_path, 1, 60)
    holder = _hold(home / "venvs" / older)
    try:
        assert main(["envs", "list", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert main(["envs", "list"]) == 0
        table = capsys.readouterr().out
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert [e["key"] for e in listed] == [older, newer]  # the holder's lease just recorded a use of `older`
    by_key = {e["key"]: e for e in listed}
    assert by_key[older]["in_use"] is True and by_key[newer]["in_use"] is False
    venvs = home / "venvs"
    for key, e in by_key.items():
        assert e["size_bytes"] == _du_bytes(list(venvs.glob(f"{key}*"))), key
        assert e["complete"] is True and e["requirements"] == [] and e["isolation"] == "shared"
        assert e["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert abs(by_key[newer]["last_used_s"] - (time.time() - 60)) < 30
    rows = {ln.split()[0]: ln for ln in table.splitlines() if ln.strip().startswith((older, newer))}
    assert rows[older].rstrip().endswith("yes") and rows[newer].rstrip().endswith("no")
    assert "2 venv(s)" in table


def test_building_past_the_bound_removes_the_least_recently_used(home: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_LIMIT_VENVS_KEPT", "2")
    first = _build(home, tmp_path, 0, 300)
    second = _build(home, tmp_path, 1, 200)
    assert _keys(home) == {first, second}
    third = _build(home, tmp_path, 2)
    assert _keys(home) == {second, third}
    monkeypatch.setenv("LMMBENCH_LIMIT_VENVS_BYTES", "1")  # the size bound: only the venv just used stays
    fourth = _build(home, tmp_path, 3)
    assert _keys(home) == {fourth}


def test_a_venv_built_before_sizes_were_recorded_gets_its_size_once_and_keeps_its_last_use(
    home: Path, tmp_path: Path
) -> None:
    old = _build(home, tmp_path, 0, 500)
    marker = home / "venvs" / old / MARKER
    meta = json.loads(marker.read_text())
    assert meta["size_bytes"] > 0  # recorded at the build
    del meta["size_bytes"]  # as a venv of an earlier lmmbench has it
    marker.write_text(json.dumps(meta))
    t = time.time() - 500
    os.utime(marker, (t, t))
    _build(home, tmp_path, 1)  # the bound, counting recorded sizes, measures the old one and records it
    assert json.loads(marker.read_text())["size_bytes"] == _du_bytes(list((home / "venvs").glob(f"{old}*")))
    assert abs(marker.stat().st_mtime - t) < 1e-3


def test_a_plan_row_holds_its_venv_while_it_runs_and_the_bound_applies_after_the_build(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real plans: the row itself runs `envs prune --keep 0`, which must keep the row's own venv; a second plan
    building another venv with `--limit venvs_kept=1` removes the first plan's, no longer in use."""
    monkeypatch.setenv("LMMBENCH_LIMIT_VENVS_KEPT", "20")  # restored after; --limit below writes the same variable
    plan = tmp_path / "plan.yaml"
    prune = "{python} -c 'import sys; from lmmbench.cli.main import main; sys.exit(main())' envs prune --keep 0"
    plan.write_text(yaml.safe_dump({"name": "p", "executor": "venv", "rows": [
        {"name": "inside", "kind": "command", "isolation": "shared", "options": {"command": prune}}]}))
    assert main(["batch", str(plan), "--out-dir", str(tmp_path / "a"), "--constraints",
                 str(_constraints(tmp_path, 0))]) == 0  # fmt: skip
    log = (tmp_path / "a" / "p" / "inside" / "command.log").read_text()
    first = venv_key([], None, _constraints(tmp_path, 0))
    assert "removed 0 venv(s)" in log and f"in use, kept whatever the bound: {first}" in log, log
    assert _keys(home) == {first}
    capsys.readouterr()
    assert main(["--limit", "venvs_kept=1", "batch", str(plan), "--out-dir", str(tmp_path / "b"), "--constraints",
                 str(_constraints(tmp_path, 1))]) == 0  # fmt: skip
    second = venv_key([], None, _constraints(tmp_path, 1))
    assert _keys(home) == {second}
    assert f"removed 1 least recently used venv(s) beyond venvs_kept=1 / venvs_bytes=107374182400 ({first};" \
        in capsys.readouterr().err


def test_a_build_in_progress_is_kept_and_a_crashed_one_removed_then_rebuilt(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A venv folder without its marker: while another process holds its build lock (as ``ensure_venv`` does while
    building) prune keeps it; once that process is gone it is a crashed build, and prune removes it; the next use
    builds it again."""
    constraints = _constraints(tmp_path, 0)
    key = venv_key([], None, constraints)
    venvs = home / "venvs"
    (venvs / key / "bin").mkdir(parents=True)  # what a build cut short leaves
    code = ("import sys; from pathlib import Path; from lmmbench.executors.venv_cache import lock_file; "
            f"h = lock_file(Path({str(venvs / (key + '.lock'))!r}), True, True); print('held', flush=True); "
            "sys.stdin.read()")  # fmt: skip
    builder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout is not None and builder.stdout.readline().strip() == "held"
        assert main(["envs", "prune", "--keep", "0"]) == 0
        out = capsys.readouterr().out
        assert _keys(home) == {key} and "removed 0 venv(s)" in out, out
        assert main(["envs", "list", "--json"]) == 0
        [entry] = json.loads(capsys.readouterr().out)
        assert entry["complete"] is False and entry["in_use"] is True
    finally:
        assert builder.stdin is not None
        builder.stdin.close()
        builder.wait(timeout=30)
    assert main(["envs", "prune"]) == 0  # the default bounds: an unfinished build goes whatever they are
    assert not _keys(home) and f"removed {key}" in capsys.readouterr().out
    again = ensure_venv([], None, constraints, home)
    assert again.created and (venvs / key / MARKER).is_file()


def test_the_automatic_bound_keeps_a_failed_builds_log_which_prune_removes(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose requirements fail to install names its build log: the bound applied when the next venv is built
    ranks that failed build as the others (it is recent: kept); `envs prune` removes what a failed build left."""
    missing = str(tmp_path / "no-such-package")
    constraints = _constraints(tmp_path, 0)
    with pytest.raises(UserError, match="venv setup failed"):
        ensure_venv([missing], None, constraints, home)
    failed = venv_key([missing], None, constraints)
    log = home / "venvs" / f"{failed}.log"
    assert log.is_file()
    built = _build(home, tmp_path, 1)
    assert log.is_file()
    assert main(["envs", "prune"]) == 0
    assert f"removed {failed}" in capsys.readouterr().out
    assert not log.exists() and _keys(home) == {built}


@pytest.mark.parametrize(("argv", "names"), [
    (["envs", "prune", "--keep", "-1"], "keep"),
    (["envs", "prune", "--older-than", "3 fortnights"], "older_than"),
    (["envs", "prune", "--older-than", "-5d"], "older_than"),
    (["--limit", "venvs_kept=0", "envs", "prune"], "LMMBENCH_LIMIT_VENVS_KEPT"),
    (["--limit", "venvs_bytes=lots", "envs", "list"], "LMMBENCH_LIMIT_VENVS_BYTES"),
])  # fmt: skip
def test_bad_options_are_one_line_and_exit_2(argv: list[str], names: str, home: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_LIMIT_VENVS_KEPT", "20")  # --limit writes these: restored after the test
    monkeypatch.setenv("LMMBENCH_LIMIT_VENVS_BYTES", "107374182400")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and names in err[0], err


def test_unknown_options_exit_2(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "prune", "--keep-last", "3"]) == 2
    assert main(["envs", "prune", "--keep", "three"]) == 2
    assert "Traceback" not in capsys.readouterr().err
