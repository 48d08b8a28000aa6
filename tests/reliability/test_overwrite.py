"""``--overwrite`` replaces a run whole and never compares the new run with the one it replaced; the perf summary
line states the output length that was sent (a data set may set it, not ``--output-tokens``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.testing.fixtures import running_testserver, server_received


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from lmmbench.core.net import free_loopback_port

    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1)) as base:
        yield base


@pytest.fixture
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run store of this test's own, so runs of other tests are never its previous runs."""
    home = tmp_path / "home"
    monkeypatch.setenv("LMMBENCH_HOME", str(home))
    return home


def test_perf_overwrite_clears_what_the_replaced_run_wrote_and_compares_with_nothing(
        url: str, tmp_path: Path, own_store: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    argv = ["perf", "--url", url, "--num-requests", "4", "--output-tokens", "2", "--no-plots", "--no-progress",
            "--out-dir", str(tmp_path / "out"), "--run-name", "same"]
    run = tmp_path / "out" / "perf" / "same"
    assert main(argv) == 0
    (run / "old-plot.png").write_bytes(b"png of the replaced run")
    (run / "replay").mkdir()
    (run / "replay" / "episode.mp4").write_bytes(b"video of the replaced run")
    capsys.readouterr()
    assert main([*argv, "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert not (run / "old-plot.png").exists() and not (run / "replay").exists()
    assert (run / "records.jsonl").is_file()
    assert "no comparison with the previous run" not in err, err
    assert not (run / "comparison.json").exists(), "the new run was compared with the run it replaced"


def test_perf_runs_of_one_name_in_two_folders_are_still_compared(
        url: str, tmp_path: Path, own_store: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The control: only the replaced run is left out; an earlier run elsewhere stays the baseline."""
    base = ["perf", "--url", url, "--num-requests", "4", "--output-tokens", "2", "--no-plots", "--no-progress",
            "--run-name", "nightly"]
    assert main([*base, "--out-dir", str(tmp_path / "day1")]) == 0
    assert main([*base, "--out-dir", str(tmp_path / "day2")]) == 0
    comparison = json.loads((tmp_path / "day2" / "perf" / "nightly" / "comparison.json").read_text())
    assert Path(comparison["baseline"]["path"]).resolve() == (tmp_path / "day1" / "perf" / "nightly").resolve()


def test_spec_overwrite_clears_the_replaced_runs_folder(tmp_path: Path, own_store: Path) -> None:
    argv = ["run", "ttft-breakdown", "--model", "tiny-llm", "--limit", "1", "--repeats", "1", "--warmup", "0",
            "--threads", "1", "--out-dir", str(tmp_path)]
    spec_dir = tmp_path / "ttft-breakdown"
    assert main(argv) == 0
    (spec_dir / "replay").mkdir()
    (spec_dir / "replay" / "old.mp4").write_bytes(b"video of the replaced run")
    (spec_dir / "trace-old.json").write_text("{}")
    assert main([*argv, "--overwrite"]) == 0
    assert not (spec_dir / "replay").exists() and not (spec_dir / "trace-old.json").exists()
    assert (spec_dir / "ttft-breakdown_results.csv").is_file()


def test_the_summary_line_states_the_output_length_sent(url: str, tmp_path: Path, own_store: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    questions = tmp_path / "question.jsonl"
    questions.write_text('{"category": "qa", "turns": ["What is the capital of France?"]}\n')
    before = len(server_received(url))
    assert main(["perf", "--url", url, "--model", "test-model", "--endpoint", "completions", "--dataset", "spec_bench",
                 "--dataset-path", str(questions), "--spec-bench-output-len", "16", "--num-requests", "3",
                 "--no-plots", "--no-progress", "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip
    sent = [r["body"].get("max_tokens") for r in server_received(url)[before:]][-3:]  # after the pre-flight probe
    assert sent and set(sent) == {16}, sent
    err = capsys.readouterr().err
    assert " out=16:" in err and " out=32:" not in err, err

