"""`lmmbench eval`: a sample whose image yields no media tokens fails (never scored as text alone);
every sample failed -> exit 2 (nothing measured) with one line; partial success -> exit 3 and the failure
count (docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main

TASKS = Path(__file__).resolve().parents[2] / "src/lmmbench/evaluation/tasks"


def _eval(out: Path, task: str, limit: int) -> int:
    return main(["eval", "--model", "tiny-vl", "--tasks", task, "--limit", str(limit), "--out-dir", str(out),
                 "--threads", "1"])


def test_images_without_media_tokens_fail_every_sample_and_exit_2_simulated_torchvision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import lmmbench.models.processor_build as pb

    # a processor that ignores images (the tokenizer AutoProcessor gives with torchvision) past the probe
    monkeypatch.setitem(pb.PARTS_BUILDERS, "qwen_vl", lambda family, path, tok: tok)
    monkeypatch.setattr(pb, "probe_processor", lambda processor, tokenizer, family: {})
    assert _eval(tmp_path, "sample_vqa", 2) == 2
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: every sample failed (2 of 2): ")  # the shared cause in the one line
    assert "yielded 1 image token(s)" in line and "(every failure alike)" in line, line
    preds = [json.loads(x) for x in next(tmp_path.glob("*/predictions/sample_vqa.jsonl")).read_text().splitlines()]
    assert len(preds) == 2
    assert all("image: processor TokenizersBackend yielded 1 image token(s)" in p["error"] for p in preds)


def test_partial_failure_exits_3_with_the_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [json.loads(x) for x in (TASKS / "data/sample_vqa.jsonl").read_text().splitlines()[:2]]
    rows[1]["image"] = "images/does_not_exist.png"
    for r in rows:
        r["image"] = str(TASKS / "data" / r["image"])
    data = tmp_path / "vqa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = tmp_path / "vqa.yaml"
    task.write_text((TASKS / "sample_vqa.yaml").read_text().replace("data/sample_vqa.jsonl", str(data))
                    .replace("task: sample_vqa", "task: vqa_partial"))
    assert _eval(tmp_path / "out", str(task), 2) == 3
    assert "1 of 2 sample(s) failed" in capsys.readouterr().err
