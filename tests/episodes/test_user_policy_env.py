"""The user's own policy and environment: the example of docs/episodes.md runs as written (the test reads
its code and its command from the page), a policy/environment mismatch is one line naming both (exit 2),
and a user's act() is called once per tick with every slot's observation."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest

from lmmbench.cli.main import main

DOC = Path(__file__).parents[2] / "docs" / "episodes.md"


def _example() -> tuple[str, list[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Your own policy and environment"):]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S)
    command = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert code and command
    argv = shlex.split(command.group(1).replace("\\\n", " "))
    assert argv[0] == "lmmbench"
    return code.group(1), argv[1:]


def test_the_docs_own_policy_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, argv = _example()
    assert len(code.strip().splitlines()) < 50  # the bound: a worked example under 50 lines
    (tmp_path / "my_policy.py").write_text(code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    rows = list(csv.DictReader((tmp_path / "results" / "episodic-eval" / "episodic-eval_results.csv").open()))
    assert len(rows) == 4 and all(r["status"] == "ok" and r["success"] in ("0", "1") for r in rows)
    batches = [int(x) for r in rows for x in r["action_batch_sizes"].split()]
    assert max(batches) == 4  # one act() call per tick for every slot that needed an action


@pytest.mark.parametrize(("env", "policy", "words"), [
    ("gym:CartPole-v1", "toy", "cannot act on its observations"),
    ("toy-waypoints", "my_policy.py:MlpPolicy", "cannot act on its observations"),
])  # fmt: skip
def test_a_mismatch_is_one_line_naming_both(
    env: str, policy: str, words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _ = _example()
    (tmp_path / "my_policy.py").write_text(code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "episodic-eval", "--env", env, "--policy", policy, "--num-tasks", "1",
                 "--num-trials-per-task", "1", "--out-dir", str(tmp_path / "out")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--policy {policy} does not fit --env {env}" in err[0] and words in err[0]


def test_a_missing_user_class_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "episodic-eval", "--env", "nowhere.py:Env", "--out-dir", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
