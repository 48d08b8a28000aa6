"""`lmmbench reference dump / compare` : same backend gives zero diff, another dtype does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main


def test_dump_then_compare_same_and_other_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = tmp_path / "ref"
    args = [
        "reference",
        "dump",
        "--model",
        "tiny-llm",
        "--prompts",
        "sample_qa",
        "--num-prompts",
        "4",
        "--threads",
        "1",
    ]
    assert main([*args, "--max-new-tokens", "5", "--out", str(ref)]) == 0
    meta = json.loads((ref / "reference.json").read_text())
    assert len(meta["prompts"]) == 4 and all(len(p["max_logits"]) == 5 for p in meta["prompts"])

    same = tmp_path / "same"
    assert main(["reference", "compare", "--model", "tiny-llm", "--reference", str(ref), "--out-dir", str(same)]) == 0
    report = json.loads((same / "report.json").read_text())
    acc = report["Accuracy"]
    assert acc["Logits Diff"]["Max Difference"] == 0.0
    assert acc["Logits Diff"]["Cosine Similarity"] == pytest.approx(1.0, abs=1e-12)
    assert acc["Token Diff"]["Max Difference"] == 0.0 and acc["Token Diff"]["Prompt Num"] == 4
    assert acc["PPL"] == acc["Reference PPL"]
    run = json.loads((same / "run.json").read_text())  # the run log, like every run's
    assert run["kind"] == "reference" and run["outcome"]["ok"] == 4 and "report.json" in run["files"]
    assert run["headline"]["logits_max_abs_diff"] == 0.0 and run["measurement"]["dtype"] == "float32"
    for png in ("logits_diff.png", "token_diff.png"):
        assert (same / png).stat().st_size > 1000

    other = tmp_path / "bf16"
    cmd = ["reference", "compare", "--model", "tiny-llm", "--reference", str(ref), "--dtype", "bfloat16"]
    assert main([*cmd, "--out-dir", str(other)]) == 0
    acc = json.loads((other / "report.json").read_text())["Accuracy"]
    d = acc["Logits Diff"]
    assert d["Max Difference"] > 0 and d["Mean Squared Error"] > 0 and 0.9 < d["Cosine Similarity"] < 1.0
    assert d["Mean Absolute Error"] <= d["Max Difference"]
    assert "logits max diff" in capsys.readouterr().out


def test_compare_without_reference_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["reference", "compare", "--model", "tiny-llm", "--reference", str(tmp_path), "--out-dir", str(tmp_path)]
    )
    assert code == 2 and "run `lmmbench reference dump` first" in capsys.readouterr().err
