"""A failed eval says why in its own log, and leaves nothing that `--resume latest` would pick."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.cli.main import main


def test_a_fatal_eval_error_is_in_logs_all_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first sample renders (checked before the model loads); the second does not, once the run has its folder."""
    (tmp_path / "data.jsonl").write_text('{"text": 1, "answer": "a"}\n{"text": "one", "answer": "a"}\n',
                                         encoding="utf-8")  # fmt: skip
    task = tmp_path / "broken.yaml"
    task.write_text("task: broken\nkind: generate\ndata:\n  path: data.jsonl\ndoc_to_text: '{{ text + 1 }}'\n"
                    "doc_to_target: '{{ answer }}'\ngeneration:\n  max_tokens: 2\n", encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    assert main(["eval", "--model", "tiny-llm", "--tasks", str(task), "--out-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "template" in err and "Traceback" not in err
    (log,) = list(out.glob("*/logs/all.log"))
    assert "run failed" in log.read_text() and "template" in log.read_text()
    assert main(["eval", "--mode", "eval", "--resume", "latest", "--tasks", str(task), "--out-dir", str(out)]) == 2
    assert "no earlier run with predictions" in capsys.readouterr().err


def test_a_template_broken_on_the_first_sample_fails_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing is loaded and no run folder is made: the error names the task file, field and sample."""
    (tmp_path / "data.jsonl").write_text('{"text": "one", "answer": "a"}\n', encoding="utf-8")
    task = tmp_path / "broken.yaml"
    task.write_text("task: broken\nkind: generate\ndata:\n  path: data.jsonl\ndoc_to_text: '{{ text + 1 }}'\n"
                    "doc_to_target: '{{ answer }}'\ngeneration:\n  max_tokens: 2\n", encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    assert main(["eval", "--model", "no-such-model-dir-xyz", "--tasks", str(task), "--out-dir", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "broken.yaml" in err[0] and "sample 0" in err[0] and "template" in err[0]
    assert not out.exists() or not any(out.iterdir())
