"""Refused before anything runs (issue 58): a row asking more GPUs than this machine has (it would run on the CPU
without a word; this machine has none, so any num_gpus > 0 is more), and an eval row's ``group_by`` naming a
column no sample of its task has."""

from __future__ import annotations

from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.executors.gpus import discover_gpus


@pytest.mark.parametrize("executor", ["inprocess", "subprocess"])
def test_num_gpus_beyond_this_machine_refused(write_plan: Any, capsys: pytest.CaptureFixture[str],
                                              executor: str) -> None:
    have = len(discover_gpus())
    path = write_plan([{"name": "c", "kind": "command", "num_gpus": have + 1, "executor": executor,
                        "options": {"command": "true"}}], name="gpu")  # fmt: skip
    assert main(["batch", str(path)]) == 2
    assert f"row 'c': num_gpus: {have + 1} but this machine has {have} GPU(s)" in capsys.readouterr().err
    assert not (path.parent / "out" / "gpu" / "c" / "status.json").exists()  # the row never ran


def test_plan_eval_row_group_by_refused_at_validation(write_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_plan([{"name": "e", "kind": "eval", "model": "tiny-llm",
                        "options": {"tasks": ["sample_mc"], "limit": 2, "group_by": ["subject+nope"]}}], name="g")
    assert main(["batch", str(path)]) == 2
    assert "row 1 'e': --group-by: task 'sample_mc' has no column 'nope'" in capsys.readouterr().err
    assert not (path.parent / "out" / "g").exists()
