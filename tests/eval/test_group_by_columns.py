"""``--group-by`` refused before anything loads when a column is one no sample has (it would make one "None"
group of every sample) or is named twice, in ``eval`` and in a plan's eval row (at validation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.cli.main import main


@pytest.mark.parametrize(("group_by", "message"), [
    ("nope", "task 'sample_mc' has no column 'nope'; its columns: answer, choices, id, question, subject"),
    ("subject+subject", "the column 'subject' is named twice"),
    ("subject,subject", "'subject' is given twice"),
])  # fmt: skip
def test_eval_group_by_refused_before_the_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      group_by: str, message: str) -> None:
    argv = ["eval", "--model", "tiny-llm", "--tasks", "sample_mc", "--limit", "2", "--threads", "1",
            "--group-by", group_by, "--out-dir", str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()

