"""lm-eval catalogue names are checked before the cost: an unknown name, and offline a data set the cache lacks,
are refused in one line without importing ``lm_eval.tasks`` (asserted through ``sys.modules`` in a fresh
process); the index behind it lists every name lm-eval's ``TaskManager`` knows; and a catalogue run leaves
nothing of lm-eval, ``datasets`` or git on the terminal (their output goes to the run's ``logs/lm-eval.log``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

PROBE = """
import sys
from lmmbench.cli.main import main
code = main(["eval", "--model", "tiny-llm", "--tasks", sys.argv[1], "--out-dir", sys.argv[2]])
print("RESULT", code, "lm_eval.tasks" in sys.modules)
"""


def _probe(task: str, tmp_path: Path, **env: str) -> tuple[int, bool, list[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, task, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, **env})  # fmt: skip
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    _, code, imported = line.split()
    return int(code), imported == "True", proc.stderr.strip().splitlines()


def test_an_unknown_catalogue_name_is_refused_without_importing_lm_eval_tasks(tmp_path: Path) -> None:
    code, imported, err = _probe("no_such_task_xyz", tmp_path)
    assert code == 2 and not imported, (code, imported, err)
    assert len(err) == 1 and "no_such_task_xyz" in err[0], err


def test_offline_a_data_set_missing_from_the_cache_is_refused_before_lm_eval_builds(tmp_path: Path) -> None:
    empty = tmp_path / "hf"
    empty.mkdir()
    code, imported, err = _probe("arc_easy", tmp_path, HF_HOME=str(empty), HF_HUB_OFFLINE="1")
    assert code == 2 and not imported, (code, imported, err)
    assert len(err) == 1 and "arc_easy: its data set allenai/ai2_arc is not in the datasets cache" in err[0], err


def test_the_index_lists_every_name_taskmanager_knows(tmp_path: Path) -> None:
    """No false refusal: every task, group and tag of the installed catalogue is in the line-scan index."""
    from lmmbench.evaluation.lmeval.catalogue import _task_manager
    from lmmbench.evaluation.lmeval.index import lmeval_tasks_dir, scan_task_names

    root = lmeval_tasks_dir()
    assert root is not None
    names, files = scan_task_names(root)
    # lm-eval's TaskManager with its index from lmmbench's cache (tests/eval/test_task_index_cache.py: the entries
    # lm-eval's own build makes), as every catalogue run of this session gets it
    missing = sorted(set(_task_manager(()).all_tasks) - names)
    assert not missing, missing[:20]
    assert Path(files["arc_easy"]).name == "arc_easy.yaml"


@pytest.fixture
def arc_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    from lmmbench.testing.hf_datasets import use_offline_cache, write_dataset_cache

    home = tmp_path / "hf"
    use_offline_cache(monkeypatch, home)
    arc = [{"id": f"q{i}", "question": f"Which animal is the largest, number {i}?",
            "choices": {"text": ["an ant", "a whale"], "label": ["A", "B"]}, "answerKey": "B"} for i in range(4)]
    write_dataset_cache(home, "allenai/ai2_arc", "ARC-Easy", {"train": arc[:1], "validation": arc[1:2],
                                                             "test": arc[2:]})  # fmt: skip
    yield home


def test_a_catalogue_run_leaves_nothing_of_lm_eval_on_the_terminal(
        arc_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Run outside a git checkout (lm-eval's `git describe` prints `fatal: not a git repository` there)."""
    from lmmbench.cli.main import main

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no checkout above the folder either
    assert main(["eval", "--model", "tiny-llm", "--tasks", "arc_easy", "--limit", "1", "--threads", "1",
                 "--out-dir", str(tmp_path / "out")]) == 0  # fmt: skip
    err = capfd.readouterr().err
    assert "fatal:" not in err and "Using the latest cached version" not in err, err[-2000:]  # git's, datasets'
    bars = [b for line in err.splitlines() for b in line.split("\r") if "it/s]" in b]
    assert all(b.startswith(("Writing model shards", "Loading weights")) for b in bars), bars  # the model's load
    log = next((tmp_path / "out").glob("*/logs/lm-eval.log")).read_text(encoding="utf-8")
    assert "fatal: not a git repository" in log  # what lm-eval's git call printed went to the run's log
    preds = next((tmp_path / "out").glob("*/predictions/arc_easy.jsonl")).read_text().splitlines()
    assert len(preds) == 1 and json.loads(preds[0])["doc_id"] == 0
