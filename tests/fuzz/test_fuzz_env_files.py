"""Files named by environment variables (``LMMBENCH_PROMPT_PATH``, ``LMMBENCH_WHISPER_SPELLING``) are read
through the bounded readers: a bad one is one ``UserError`` naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _zip_without_metadata(path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("lmmbench/__init__.py", "")


@pytest.mark.parametrize(("variable", "make", "says"), [
    ("LMMBENCH_WHEEL", lambda p: None, "no such file"),
    ("LMMBENCH_WHEEL", lambda p: p.write_bytes(b"\x00not a zip"), "not a wheel"),
    ("LMMBENCH_WHEEL", _zip_without_metadata, "not a wheel"),
    ("LMMBENCH_CONTAINER_CACHE", lambda p: p.write_text("a file"), "not a folder"),
], ids=["wheel-missing", "wheel-not-a-zip", "wheel-without-metadata", "container-cache-a-file"])  # fmt: skip
def test_a_wheel_or_container_cache_from_the_environment_that_is_not_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str,
    make: Any, says: str,
) -> None:  # fmt: skip
    """`envs build-image` checks what the environment names before it asks a container engine anything: one line
    naming the variable or the file, exit 2 (no engine is needed to see it)."""
    from lmmbench.cli.main import main

    path = tmp_path / ("lmmbench-0.1.0-py3-none-any.whl" if variable == "LMMBENCH_WHEEL" else "cache")
    make(path)
    monkeypatch.setenv(variable, str(path))
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "no-such-engine-binary")  # never reached
    assert main(["envs", "build-image"]) == 2
    text = capsys.readouterr().err
    err = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and says in err[0] and str(path) in err[0] and "Traceback" not in text, text
