"""`lmmbench run`: output files, the breakdown field names, invariants, the 95 % goal, resume, failures, bad input."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.engines.inprocess_breakdown import BREAKDOWN_FIELDS
from lmmbench.media.manifest import write_manifest
from lmmbench.profiling.stages import OTHERS_PARTS, PREFILL_PARTS
from lmmbench.reports.results_csv import ResultsCsv, read_rows
from lmmbench.specs import Case, RunOptions, Spec, SpecContext, UnifiedRunner

SEED_FIELDS = ("extract_ms, pack_ms, audio_feature_ms, preprocess_ms, visual_encoder_ms, audio_encoder_ms, "
               "prefill_ms, llm_prefill_ms, others_ms, ttft_ms, visual_tokens, audio_tokens, text_tokens, "
               "total_tokens, duration, mel_frames").split(", ")


def _f(row: dict[str, str], key: str) -> float:
    return float(row[key])


@pytest.fixture(scope="module")
def breakdown_run(tmp_path_factory: pytest.TempPathFactory, synth_manifest: Path) -> Path:
    out = tmp_path_factory.mktemp("run")
    code = main(["run", "ttft-breakdown", "--model", "tiny-omni", "--manifest", str(synth_manifest),
                 "--out-dir", str(out), "--repeats", "3", "--warmup", "1", "--threads", "1", "--no-progress"])
    assert code == 0
    return out / "ttft-breakdown"


def test_every_output_file_is_written(breakdown_run: Path) -> None:
    for name in ("ttft-breakdown_results.csv", "ttft-breakdown_summary.csv", "ttft-breakdown_plot.png",
                 "ttft-breakdown_analysis.json", "run.json"):
        assert (breakdown_run / name).stat().st_size > 0, name
    run = json.loads((breakdown_run / "run.json").read_text())
    assert run["schema_version"] == 2 and run["kind"] == "spec" and run["config"]["seed"] == 0
    assert run["measurement"]["timer"] == "perf_counter_ns" and run["measurement"]["threads"] == 1
    assert run["outcome"]["ok"] > 0 and run["headline"]["ttft_ms_median"] > 0 and "report.html" in run["files"]
    assert run["config"]["repeats"] == 3 and run["environment"]["libraries"]["torch"]
    assert "commit" in run["environment"]["git"] and run["environment"]["gpu"]["available"] is False
    summary = read_rows(breakdown_run / "ttft-breakdown_summary.csv")
    assert {"sample", "group", "all"} <= {r["level"] for r in summary}
    assert {"mean", "std", "p50", "p90"} <= set(summary[0])


def test_results_have_the_breakdown_fields_and_the_invariants_hold(breakdown_run: Path) -> None:
    rows = read_rows(breakdown_run / "ttft-breakdown_results.csv")
    assert list(BREAKDOWN_FIELDS) == SEED_FIELDS
    assert set(SEED_FIELDS) <= set(rows[0]) and any("unattributed" in c for c in rows[0])
    assert len(rows) == 4 * 3 and all(r["status"] == "ok" for r in rows)
    assert rows[0]["group"] == "video+audio" and "duration_s" in rows[0]  # manifest extras carried
    # the study's own timer (first forward minus the encoders in it) against the parts inside that forward: the
    # marks are one hook call apart (µs); a row preempted between two of them on a loaded box may differ, so most
    gaps = sorted(abs(_f(r, "prefill_study_timer_ms") - _f(r, "prefill_ms") + _f(r, "prefill_outside_forward_ms"))
                  for r in rows)
    assert gaps[len(gaps) // 2] <= 0.05 and sum(g <= 0.1 for g in gaps) >= 0.75 * len(gaps), gaps
    for r in rows:
        ttft = _f(r, "ttft_ms")
        parts = _f(r, "visual_encoder_ms") + _f(r, "audio_encoder_ms") + _f(r, "prefill_ms") + _f(r, "others_ms")
        assert parts == pytest.approx(ttft, rel=1e-4, abs=1e-3)
        assert sum(_f(r, p) for p in OTHERS_PARTS) == pytest.approx(_f(r, "others_ms"), rel=1e-4, abs=1e-3)
        assert sum(_f(r, p) for p in PREFILL_PARTS) == pytest.approx(_f(r, "prefill_ms"), rel=1e-4, abs=1e-3)
        assert _f(r, "preprocess_ms") == pytest.approx(
            _f(r, "extract_ms") + _f(r, "pack_ms") + _f(r, "audio_feature_ms"), rel=1e-4)
    video = [r for r in rows if r["sample_id"] == "video_2s"]
    assert all(_f(r, "visual_encoder_ms") > 0 and _f(r, "audio_encoder_ms") > 0 for r in video)


def test_named_stages_explain_95_percent_of_ttft_on_every_sample(breakdown_run: Path) -> None:
    analysis = json.loads((breakdown_run / "ttft-breakdown_analysis.json").read_text())
    una = analysis["unattributed"]
    assert set(una["per_sample_pct"]) == {"video_1s", "video_2s", "image_224x224", "audio_4s"}
    assert una["max_pct_per_sample"] <= 5.0, una
    assert una["meets_goal"] is True
    fit = analysis["fits"]["visual_encoder_ms~visual_tokens"]
    assert {"slope_ms_per_unit", "intercept_ms", "r2"} <= set(fit)
    shares = analysis["shares_of_ttft_ms"]
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)


def test_the_run_is_laid_beside_the_ttft_study(breakdown_run: Path) -> None:
    analysis = json.loads((breakdown_run / "ttft-breakdown_analysis.json").read_text())
    comp = analysis["ttft_study_comparison"]
    assert comp["study"]["others_share_pct"] == 53 and comp["study"]["audio_shape"] == "constant"
    shares = comp["shares_pct"]
    study = sum(shares[k] for k in ("visual_share_pct", "audio_share_pct", "prefill_share_pct", "others_share_pct"))
    assert study == pytest.approx(100.0, abs=0.1)  # the study's four stages cover TTFT
    assert shares["prefill_share_pct"] > shares["llm_prefill_share_pct"] > 0
    # both sides: the four stages and the unattributed remainder add to 100 % of TTFT, and the study's prefill
    # ("LLM prefill": merge + LLM forward) is set beside the run's prefill_ms, not beside the LLM forward alone
    four = ("visual_share_pct", "audio_share_pct", "prefill_share_pct", "others_share_pct", "remainder_share_pct")
    assert sum(shares[k] for k in four) == pytest.approx(100.0, abs=1e-5)  # each share is rounded to 1e-6
    assert sum(comp["study"][k] for k in four) == 100.0 and comp["study"]["prefill_share_pct"] == 17.0
    assert "llm_prefill_share_pct" not in comp["study"]
    prefill = [v for v in comp["verdicts"] if v.startswith("prefill (prefill_ms")]
    assert len(prefill) == 1 and f"{shares['prefill_share_pct']:.1f} % of TTFT" in prefill[0]
    assert not any("llm_prefill_ms" in v for v in comp["verdicts"])
    assert any(v.startswith("the four stages add to") and "(100 % in all)" in v for v in comp["verdicts"])
    assert comp["visual_fit"]["n_samples"] == 3 and comp["audio_vs_duration"]["n_samples"] == 4  # image + wav has both
    assert comp["prefill_fit"]["r2"] is not None and len(comp["verdicts"]) >= 6
    page = (breakdown_run / "report.html").read_text(encoding="utf-8")
    assert "Beside the TTFT study" in page and "<table class='study'>" in page
    assert "53 %" in page and "constant, ≈ 22 ms" in page and "≈ 0.5" in page
    assert "<td>the four stages and the remainder, % of TTFT</td><td>100.0 %</td><td>100.0 %</td>" in page
    assert "unattributed to the four stages (TTFT − their sum)" in page
    for verdict in comp["verdicts"]:  # every verdict in words is on the page
        assert html.escape(verdict) in page


def test_resume_skips_rows_already_measured(tmp_path: Path, synth_manifest: Path) -> None:
    args = ["run", "ttft-breakdown", "--model", "tiny-omni", "--manifest", str(synth_manifest),
            "--out-dir", str(tmp_path), "--warmup", "0", "--limit", "2", "--no-progress"]
    assert main([*args, "--repeats", "1"]) == 0
    results = tmp_path / "ttft-breakdown" / "ttft-breakdown_results.csv"
    first = read_rows(results)
    assert main([*args, "--repeats", "2", "--resume"]) == 0
    rows = read_rows(results)
    assert rows[:2] == first
    assert sorted((r["sample_id"], r["repeat"]) for r in rows) == sorted(
        [(s, str(k)) for s in ("video_1s", "video_2s") for k in (0, 1)])


def test_a_corrupt_file_fails_its_row_and_the_run_goes_on(tmp_path: Path, synth_manifest: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.mp4").write_bytes(b"\x00garbage" * 200)
    good = synth_manifest.parent / "audio/tone_4s.wav"
    manifest = write_manifest(tmp_path / "m.csv", [
        {"id": "bad", "video": "broken.mp4", "prompt": "hi"},
        {"id": "good", "audio": str(good), "prompt": "hi"},
    ])
    code = main(["run", "ttft-breakdown", "--model", "tiny-omni", "--manifest", str(manifest), "--out-dir",
                 str(tmp_path / "out"), "--repeats", "1", "--warmup", "0", "--no-progress"])
    assert code == 3  # partial: one row failed, the other measured (docs/reliability.md)
    rows = {r["sample_id"]: r for r in read_rows(tmp_path / "out/ttft-breakdown/ttft-breakdown_results.csv")}
    assert rows["bad"]["status"] == "failed" and "broken.mp4" in rows["bad"]["error"]
    assert rows["good"]["status"] == "ok" and float(rows["good"]["ttft_ms"]) > 0
    assert "1 row(s) failed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "no-such-model"], "neither a built-in model"),
        (["--model", "{tmp}"], "not a model directory"),
        (["--manifest", "{tmp}/missing.csv"], "manifest not found"),
        (["--manifest", "{tmp}/nocol.csv"], "missing column"),
        (["--repeats", "0"], "repeats"),
        (["--device", "tpu"], "device"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              args: list[str], message: str) -> None:
    (tmp_path / "nocol.csv").write_text("id,prompt\na,b\n")
    argv = ["run", "ttft-breakdown", "--out-dir", str(tmp_path / "o"), "--no-progress",
            *[a.format(tmp=tmp_path) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


class _CountingSpec(Spec):
    name = "counting"
    columns = ("value_ms",)

    def __init__(self, interrupt_at: int) -> None:
        self.calls = 0
        self.warm_calls = 0
        self.interrupt_at = interrupt_at

    def setup(self, ctx: SpecContext) -> list[Case]:
        return [Case(id=f"s{i}", group="g") for i in range(3)]

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        if ctx.warmup:
            self.warm_calls += 1
            return {}
        self.calls += 1
        if self.calls == self.interrupt_at:
            raise KeyboardInterrupt
        if case.id == "s1":
            raise ValueError("bad sample")
        return {"value_ms": float(self.calls)}


def test_ctrl_c_keeps_every_row_already_measured(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    spec = _CountingSpec(interrupt_at=4)
    ctx = SpecContext(options=RunOptions(), spec_dir=tmp_path)
    with ResultsCsv(path, ["spec", "sample_id", "group", "repeat", "status", "error", "value_ms"]) as sink, \
            pytest.raises(KeyboardInterrupt):
        UnifiedRunner(spec, ctx, sink.append).run(spec.setup(ctx), repeats=2, warmup=0, progress=False)
    rows = read_rows(path)
    assert [(r["sample_id"], r["repeat"], r["status"]) for r in rows] == [
        ("s0", "0", "ok"), ("s0", "1", "ok"), ("s1", "0", "failed")]
    assert rows[2]["error"] == "ValueError: bad sample"
    again = _CountingSpec(0)
    with ResultsCsv(path, ["spec", "sample_id", "group", "repeat", "status", "error", "value_ms"],
                    resume=True) as sink:
        stats = UnifiedRunner(again, ctx, sink.append, sink.done).run(
            spec.setup(ctx), repeats=2, warmup=1, progress=False, interleave=True)
    assert (stats.skipped, stats.ok, stats.failed) == (2, 2, 2)
    assert again.warm_calls == 2 and not ctx.warmup  # s1 and s2 warmed up once each, s0 was done
    assert not math.isnan(float(read_rows(path)[-1]["value_ms"]))


def test_specs_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["specs"]) == 0
    out = capsys.readouterr().out
    assert "ttft-breakdown" in out and "token-scaling" in out


def test_token_scaling_visual_encoder_is_linear_in_visual_tokens(tmp_path: Path) -> None:
    code = main(["run", "token-scaling", "--model", "tiny-omni", "--out-dir", str(tmp_path), "--repeats", "3",
                 "--frames", "4,8,16,24,32", "--image-sizes", "112,224", "--audio-seconds", "1,4",
                 "--text-words", "16,128", "--threads", "1", "--no-progress"])
    assert code == 0
    out = tmp_path / "token-scaling"
    analysis = json.loads((out / "token-scaling_analysis.json").read_text())
    fit = analysis["fits"]["visual_encoder_ms~visual_tokens"]
    assert fit["n_samples"] == 7 and fit["slope_ms_per_unit"] > 0
    # The goal (R² >= 0.95, docs/ttft-breakdown.md) is met by the full spec on a quiet machine; on this
    # shared 2-core box other jobs add noise even to the fastest repeat, so the test keeps a margin.
    assert fit["r2"] >= 0.9, fit
    comp = analysis["ttft_study_comparison"]  # token-scaling is laid beside the study too
    assert comp["audio_vs_duration"]["n_samples"] == 2 and comp["visual_fit"]["n_samples"] == 7
    rows = read_rows(out / "token-scaling_results.csv")
    frames = {r["level"]: int(r["visual_tokens"]) for r in rows if r["sweep"] == "frames"}
    assert frames["32"] == 8 * frames["4"]  # visual tokens scale with frames
    assert all(int(r["audio_tokens"]) == 0 for r in rows if r["sweep"] == "frames")
    with (out / "token-scaling_results.csv").open() as fh:
        assert "sweep" in next(csv.reader(fh))


@pytest.mark.parametrize(("model", "visual"), [("tiny-vl", True), ("tiny-llm", False)])
def test_vision_language_and_text_models_run_the_same_spec(tmp_path: Path, model: str, visual: bool) -> None:
    assert main(["run", "ttft-breakdown", "--model", model, "--out-dir", str(tmp_path), "--repeats", "1",
                 "--warmup", "0", "--threads", "1", "--no-progress"]) == 0
    rows = read_rows(tmp_path / "ttft-breakdown" / "ttft-breakdown_results.csv")
    assert rows and all(r["status"] == "ok" for r in rows)
    assert all(int(r["audio_tokens"]) == 0 and float(r["audio_encoder_ms"]) == 0 for r in rows)
    video = next(r for r in rows if r["sample_id"] == "video_1s")
    assert (float(video["visual_encoder_ms"]) > 0) is visual and (int(video["visual_tokens"]) > 0) is visual
    assert video["modalities"] == ("video" if visual else "text")
    for r in rows:
        assert sum(_f(r, p) for p in OTHERS_PARTS) == pytest.approx(_f(r, "others_ms"), rel=1e-4, abs=1e-3)
    run = json.loads((tmp_path / "ttft-breakdown" / "run.json").read_text())
    assert run["run"]["hooks"]["module_paths"]["llm"] in ("model.language_model", "model")
