"""Files named by environment variables (``LMMBENCH_PROMPT_PATH``, ``LMMBENCH_WHISPER_SPELLING``) are read
through the bounded readers: a bad one is one ``UserError`` naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.core.errors import UserError


def test_a_prompt_folder_from_the_environment_with_a_non_utf8_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lmmbench.evaluation.prompt_registry import resolve_prompt

    folder = tmp_path / "shared-prompts"
    folder.mkdir()
    (folder / "qa@1.txt").write_bytes(b"Question: \xff\xfe {{question}}")
    monkeypatch.setenv("LMMBENCH_PROMPT_PATH", str(folder))
    with pytest.raises(UserError) as err:
        resolve_prompt("qa@1", tmp_path / "elsewhere")
    assert "qa@1.txt" in str(err.value) and "UTF-8" in str(err.value)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_a_spelling_table_from_the_environment_that_is_not_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    from lmmbench.metrics.accuracy_mm import corpus_wer

    table = tmp_path / "english.json"
    table.write_bytes(content)
    monkeypatch.setenv("LMMBENCH_WHISPER_SPELLING", str(table))
    with pytest.raises(UserError) as err:
        corpus_wer(["the colour red"], ["the color red"])
    assert "english.json" in str(err.value)
