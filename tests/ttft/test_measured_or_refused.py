"""Measured or refused (issue 9): no breakdown row is `ok` unless every medium reached the model, a
dropped hook leaves its stage empty and the rows degraded, and `run` exits 1 when no row is ok.

"Torchvision present" is simulated (torchvision has no CPU build here): on the GPU machine
``AutoProcessor.from_pretrained(<built-in dir>)`` returns the tokenizer, which takes ``videos=`` /
``audio=`` and ignores them; the fixture below makes AutoProcessor return exactly that.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.models import resolve_model
from lmmbench.reports.results_csv import numeric, read_rows


@pytest.fixture
def torchvision_resolution(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """AutoProcessor resolves a model directory to its tokenizer, as on the GPU machine; returns the calls."""
    import transformers

    calls: list[str] = []

    def tokenizer_as_processor(path: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(path))
        return transformers.AutoTokenizer.from_pretrained(path)

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", tokenizer_as_processor)
    return calls


@pytest.fixture(scope="module")
def declared_omni_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-omni, copied, with its processor declared (so the stock AutoProcessor path is tried)."""
    out = tmp_path_factory.mktemp("declared") / "omni-declared"
    shutil.copytree(resolve_model("tiny-omni").path, out)
    cfg_path = out / "preprocessor_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["processor_class"] = "Qwen2_5OmniProcessor"
    cfg_path.write_text(json.dumps(cfg))
    return out


def _run(model: str, manifest: Path, out: Path, *extra: str) -> int:
    return main(["run", "ttft-breakdown", "--model", model, "--manifest", str(manifest), "--out-dir", str(out),
                 "--repeats", "1", "--warmup", "0", "--threads", "1", "--no-progress", *extra])


def _assert_every_medium_reached_the_model(rows: list[dict[str, str]]) -> None:
    for r in rows:
        kinds = r["modalities"].split("+")
        if {"video", "image"} & set(kinds):
            assert numeric(r["visual_tokens"]) > 1, r  # more than the lone placeholder
        if {"audio", "video-audio-track"} & set(kinds):
            assert numeric(r["audio_tokens"]) > 0 and numeric(r["mel_frames"]) > 0, r


def test_stock_processor_that_is_a_tokenizer_is_rejected_simulated_torchvision(
        tmp_path: Path, synth_manifest: Path, declared_omni_dir: Path, torchvision_resolution: list[str]) -> None:
    assert _run(str(declared_omni_dir), synth_manifest, tmp_path) == 0
    assert torchvision_resolution, "the stock path was not tried"
    spec_dir = tmp_path / "ttft-breakdown"
    rows = read_rows(spec_dir / "ttft-breakdown_results.csv")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    _assert_every_medium_reached_the_model(rows)
    proc = json.loads((spec_dir / "run.json").read_text())["run"]["processor"]
    assert proc["path"] == "assembled_from_parts"
    assert proc["classes"]["processor"] == "Qwen2_5OmniProcessor"
    assert proc["classes"]["video_processor"] == "NumpyQwenVideoProcessor"
    assert "not a multimodal processor" in proc["rejected"][0]
    assert proc["probe"]["video_tokens"] > 1 and proc["probe"]["audio_tokens"] > 0


def test_builtin_directory_never_asks_autoprocessor_simulated_torchvision(torchvision_resolution: list[str]) -> None:
    from transformers import AutoTokenizer

    from lmmbench.models.processor_build import build_family_processor

    ref = resolve_model("tiny-vl")
    built = build_family_processor(ref.record, ref.path, AutoTokenizer.from_pretrained(str(ref.path)))
    assert torchvision_resolution == [] and built.path == "assembled_from_parts"
    assert built.probe["video_tokens"] > 1 and built.probe["image_tokens"] > 1


def test_a_processor_that_ignores_media_is_refused_simulated_torchvision(
        tmp_path: Path, synth_manifest: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], torchvision_resolution: list[str]) -> None:
    import lmmbench.models.processor_build as pb

    monkeypatch.setitem(pb.PARTS_BUILDERS, "qwen_omni", lambda family, path, tok: tok)  # parts give a tokenizer too
    assert _run("tiny-omni", synth_manifest, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "processor refused" in err[0] and "not a multimodal processor" in err[0], err


def test_rows_whose_media_yield_no_tokens_fail_and_run_exits_2_simulated_torchvision(
        tmp_path: Path, synth_manifest: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], torchvision_resolution: list[str]) -> None:
    import lmmbench.models.processor_build as pb

    # a processor that slipped past the probe and ignores every medium, as the GPU machine's did
    monkeypatch.setitem(pb.PARTS_BUILDERS, "qwen_omni", lambda family, path, tok: tok)
    monkeypatch.setattr(pb, "probe_processor", lambda processor, tokenizer, family: {})
    assert _run("tiny-omni", synth_manifest, tmp_path) == 2
    rows = read_rows(tmp_path / "ttft-breakdown" / "ttft-breakdown_results.csv")
    assert len(rows) == 4 and all(r["status"] == "failed" for r in rows)
    by_id = {r["sample_id"]: r["error"] for r in rows}
    assert "video: processor TokenizersBackend yielded 1 video token(s)" in by_id["video_1s"]
    assert "image: processor TokenizersBackend" in by_id["image_224x224"]
    assert "audio: processor TokenizersBackend yielded 0 audio token(s) and 0 mel frame(s)" in by_id["audio_4s"]
    assert all(r["visual_tokens"] == "" and r["ttft_ms"] == "" for r in rows)  # nothing measured, nothing written
    err = capsys.readouterr().err
    assert "error: no row measured ok (4 failed, 0 degraded)" in err
    stats = json.loads((tmp_path / "ttft-breakdown" / "run.json").read_text())["outcome"]
    assert stats["rows"] == {"ok": 0, "degraded": 0, "failed": 4}


def test_a_hook_that_raises_leaves_its_stage_empty_and_rows_degraded(
        tmp_path: Path, synth_manifest: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import lmmbench.profiling.timeline as tl_mod

    real_open = tl_mod.Timeline.open
    visual_opens = {"n": 0}

    def open_failing_on_second_visual(self: Any, category: str) -> int:
        if category == "visual":
            visual_opens["n"] += 1
            if visual_opens["n"] == 2:
                raise RuntimeError("boom in the visual hook")
        return real_open(self, category)

    monkeypatch.setattr(tl_mod.Timeline, "open", open_failing_on_second_visual)
    assert _run("tiny-omni", synth_manifest, tmp_path) == 3  # one row ok, three degraded: partial
    spec_dir = tmp_path / "ttft-breakdown"
    rows = read_rows(spec_dir / "ttft-breakdown_results.csv")
    assert [r["status"] for r in rows] == ["ok", "degraded", "degraded", "degraded"]
    assert numeric(rows[0]["visual_encoder_ms"]) > 0
    for r in rows[1:]:  # the stage and what is computed from it are empty, never 0.0
        assert r["visual_encoder_ms"] == "" and r["others_ms"] == "", r
        assert numeric(r["ttft_ms"]) > 0 and numeric(r["audio_encoder_ms"]) >= 0
        assert "boom in the visual hook" in r["error"] and "boom in the visual hook" in r["hook_errors"]
    run = json.loads((spec_dir / "run.json").read_text())
    assert "boom in the visual hook" in run["run"]["dropped_hooks"]["visual"]
    assert run["outcome"]["rows"] == {"ok": 1, "degraded": 3, "failed": 0}
    analysis = json.loads((spec_dir / "ttft-breakdown_analysis.json").read_text())
    assert analysis["rows_ok"] == 1 and analysis["rows_degraded"] == 3 and analysis["rows_failed"] == 0
    assert analysis["unattributed"]["rows"] == 1
    assert set(analysis["unattributed"]["per_sample_pct"]) == {rows[0]["sample_id"]}
    captured = capsys.readouterr()
    assert "hook 'visual' dropped" in captured.err
    assert "1 measured (1 in this run, 0 already done), 3 degraded, 0 failed" in captured.out
    assert "from 1 ok row(s)" in captured.out


def test_every_row_degraded_exits_1(tmp_path: Path, synth_manifest: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    import lmmbench.profiling.timeline as tl_mod

    real_open = tl_mod.Timeline.open

    def open_failing_on_audio(self: Any, category: str) -> int:
        if category == "audio":
            raise RuntimeError("audio hook broke")
        return real_open(self, category)

    monkeypatch.setattr(tl_mod.Timeline, "open", open_failing_on_audio)
    assert _run("tiny-omni", synth_manifest, tmp_path, "--limit", "2") == 2
    rows = read_rows(tmp_path / "ttft-breakdown" / "ttft-breakdown_results.csv")
    assert [r["status"] for r in rows] == ["degraded", "degraded"]
    assert all(r["audio_encoder_ms"] == "" for r in rows)
    assert "error: no row measured ok (0 failed, 2 degraded)" in capsys.readouterr().err
