"""lmms-eval's nine standard multimodal benchmarks by name (``lmmbench eval --tasks mmmu_val,...``).

The data: small synthetic sets in each hub data set's real schema, in the ``datasets`` Arrow cache, read
offline (``lmmbench.testing.mm_datasets``). Through an endpoint: a scripted OpenAI-compatible server answers
each row with a fixed answer (the gold one in several written forms, or a wrong one); the scores must
equal what lmms-eval 0.7.3's OWN task functions give for those answers, stored with their versions in
``tests/eval/data/lmms_eval_expected.json`` by ``benchmarks/lmms_eval_crosscheck.py metrics`` (run in
lmms-eval's venv). In process: the built-in tiny-vl (images, video frames) and tiny-omni (audio).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.testing import mm_datasets
from lmmbench.testing.scripted_server import ScriptedServer

EXPECTED = json.loads((Path(__file__).parent / "data" / "lmms_eval_expected.json").read_text())
TASKS = list(mm_datasets.TASK_ROWS)
IMAGE_TASKS = ["mmmu_val", "chartqa", "docvqa_val", "textvqa_val", "ai2d", "scienceqa_img", "mme"]


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The nine synthetic benchmarks in an offline ``datasets`` cache (HF_HOME set for the module)."""
    hf = tmp_path_factory.mktemp("hf")
    with pytest.MonkeyPatch.context() as mp:
        _offline(mp, hf)
        mp.delenv("LMMBENCH_WHISPER_SPELLING", raising=False)
        mm_datasets.write_all(hf)
        yield hf


def _offline(mp: pytest.MonkeyPatch, hf: Path) -> None:
    """HF_HOME and offline mode, also in `datasets` / `huggingface_hub` if an earlier test imported them
    (they read the variables once, at import)."""
    import sys

    mp.setenv("HF_HOME", str(hf))
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("HF_DATASETS_OFFLINE", "1")
    mp.delenv("HF_DATASETS_CACHE", raising=False)
    for mod, attrs in (("huggingface_hub.constants", ("HF_HUB_OFFLINE",)), ("datasets.config", ("HF_HUB_OFFLINE",))):
        if mod in sys.modules:
            for attr in attrs:
                mp.setattr(sys.modules[mod], attr, True)


@pytest.fixture(scope="module")
def endpoint_run(hf_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """All nine by name through `lmmbench eval` against the scripted server."""
    out = tmp_path_factory.mktemp("eval")
    with ScriptedServer(mm_datasets.rules(), default="zzz") as srv:
        rc = main(["eval", "--model", srv.url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks",
                   ",".join(TASKS), "--out-dir", str(out)])  # fmt: skip
        requests = list(srv.requests)
    run = next(out.glob("*/run.json")).parent
    results = {t: json.loads((run / "results" / f"{t}.json").read_text()) for t in TASKS}
    return {"rc": rc, "run": run, "results": results, "requests": requests}


def test_all_nine_by_name_through_an_endpoint_score_as_lmms_evals_own_functions(endpoint_run: dict[str, Any]) -> None:
    assert endpoint_run["rc"] == 0
    assert EXPECTED["versions"]["lmms_eval"] == "0.7.3"
    for task in TASKS:
        res = endpoint_run["results"][task]
        assert res["n_samples"] == len(mm_datasets.TASK_ROWS[task]) and res["n_errors"] == 0, task
        got = {k: v["value"] for k, v in res["metrics"].items()}
        want = EXPECTED["tasks"][task]
        assert set(got) == set(want), task
        for name, value in want.items():  # sums of a few fractions: equal up to float rounding
            assert got[name] == pytest.approx(value, abs=1e-9), (task, name)
    # non-trivial: the scripted answers give neither all-right nor all-wrong scores
    assert 0 < EXPECTED["tasks"]["mmmu_val"]["mmmu_acc"] < 1
    assert 0 < EXPECTED["tasks"]["textvqa_val"]["exact_match"] < 1
    assert 0 < EXPECTED["tasks"]["librispeech_test_clean"]["wer"] < 100


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_endpoint_gets_each_rows_own_media_in_lmms_evals_message_layout(endpoint_run: dict[str, Any]) -> None:
    reqs = endpoint_run["requests"]
    assert len(reqs) == sum(len(r) for r in mm_datasets.TASK_ROWS.values())
    sent = {m["sha256"] for r in reqs for m in r["media"]}
    # images as stored (PNG of the RGB image: the stored bytes here) and clips byte for byte
    for task in ("chartqa", "docvqa_val", "textvqa_val", "ai2d", "scienceqa_img", "mme"):
        assert {_sha(row["image"]["bytes"]) for row in mm_datasets.TASK_ROWS[task]} <= sent, task
    assert {_sha(row["audio"]["bytes"]) for row in mm_datasets.TASK_ROWS["librispeech_test_clean"]} <= sent
    interleaved = [r for r in reqs if r["texts"][0].startswith(("Q2: Look at", "Q5: Which option"))]
    for r in reqs:  # one user turn: the media first, then one text part (MMMU: text and images interleaved)
        if r not in interleaved:
            assert r["layout"] == ["media"] * len(r["media"]) + ["text"]
    # MMMU as lmms-eval 0.7.3 sent these rows (recorded from its CLI by benchmarks/lmms_eval_crosscheck.py)
    q2, q5 = sorted(interleaved, key=lambda r: r["texts"][0])
    assert q2["layout"] == ["text", "media", "text"] and q2["texts"][0] == "Q2: Look at"
    assert q2["texts"][1].startswith(". Which colour is shown?\nA. red\nB. green")
    assert q5["layout"] == ["media", "text", "media", "text"]  # <image 2> is option A
    assert q5["texts"] == ["Q5: Which option matches the figure?\nA.",
                           "B. a circle\nC. a line\n\nAnswer with the option's letter from the given choices directly."]
    video = [r for r in reqs if "based on the video" in r["texts"][0]]
    # 10 frames sampled uniformly, fewer when the clip has fewer (8 and 12 frames written)
    assert sorted(len(r["media"]) for r in video) == [8, 8, 10, 10]
    chart = next(r for r in reqs if r["texts"][0].startswith("Q1: What is the value of the first bar?"))
    assert chart["texts"] == ["Q1: What is the value of the first bar?\nAnswer the question with a single word."]
    assert chart["max_tokens"] == 16 and chart["temperature"] == 0.0


def test_results_are_an_ordinary_eval_run_with_per_category_breakdowns(endpoint_run: dict[str, Any]) -> None:
    run: Path = endpoint_run["run"]
    log = json.loads((run / "run.json").read_text())
    assert log["kind"] == "eval" and log["outcome"]["ok"] == sum(len(r) for r in mm_datasets.TASK_ROWS.values())
    mmmu = endpoint_run["results"]["mmmu_val"]["groups"]
    assert set(mmmu["subject"]) == {"Art_Theory", "Math", "Physics", "History", "Computer_Science"}
    assert mmmu["subject"]["Art_Theory"]["mmmu_acc"]["value"] == 1.0  # "A" and "The answer is (B)." both right
    assert mmmu["domain"]["Science"]["mmmu_acc"]["n"] == 3
    mme = endpoint_run["results"]["mme"]["groups"]["category"]
    assert mme["existence"]["mme_perception_score"]["value"] == 200.0  # both right: acc 100 + acc+ 100
    assert mme["code_reasoning"]["mme_cognition_score"]["value"] == 50.0  # one of two: acc 50 + acc+ 0
    assert (run / "summary" / "mme_by_category.csv").is_file()
    wer = endpoint_run["results"]["librispeech_test_clean"]["metrics"]["wer"]
    assert wer["extra"]["lower_is_better"] and "whisper_spelling_table" in wer["extra"]  # how WER was taken
    video = endpoint_run["results"]["videomme"]["metrics"]["videomme_perception_score"]
    assert video["extra"]["frames_per_video"] == 10
    assert "## mmmu_val by subject" in (run / "summary" / "summary.md").read_text()
    rows = (run / "results" / "mmmu_val_metrics.csv").read_text().splitlines()
    assert rows[0].startswith("doc_id,subject,domain,mmmu_acc,parsed")


def test_in_process_tiny_vl_runs_the_image_and_video_benchmarks(hf_cache: Path, tmp_path: Path) -> None:
    rc = main(["eval", "--model", "tiny-vl", "--tasks", ",".join([*IMAGE_TASKS, "videomme"]), "--limit", "2",
               "--gen_kwargs", "max_new_tokens=3", "--threads", "1", "--out-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    run = next(tmp_path.glob("*/run.json")).parent
    for task in [*IMAGE_TASKS, "videomme"]:
        res = json.loads((run / "results" / f"{task}.json").read_text())
        # no failed sample: the engine fails a sample whose images yield no media tokens (engines/inputs.py)
        assert res["n_samples"] == 2 and res["n_errors"] == 0, task
        preds = [json.loads(x) for x in (run / "predictions" / f"{task}.jsonl").read_text().splitlines()]
        assert all(p["images"] and isinstance(p["output"], str) for p in preds), task


def test_in_process_tiny_omni_transcribes_librispeech(hf_cache: Path, tmp_path: Path) -> None:
    rc = main(["eval", "--model", "tiny-omni", "--tasks", "librispeech_test_clean", "--limit", "2",
               "--gen_kwargs", "max_new_tokens=3", "--threads", "1", "--out-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    run = next(tmp_path.glob("*/run.json")).parent
    res = json.loads((run / "results" / "librispeech_test_clean.json").read_text())
    assert res["n_errors"] == 0 and res["metrics"]["wer"]["value"] >= 0
    preds = [json.loads(x) for x in (run / "predictions" / "librispeech_test_clean.jsonl").read_text().splitlines()]
    assert all(p["audio"] and p["audio"][0].endswith(".wav") for p in preds)


def test_a_benchmark_missing_from_the_cache_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _offline(monkeypatch, tmp_path / "empty")
    with ScriptedServer([], default="A") as srv:
        rc = main(["eval", "--model", srv.url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks", "ai2d",
                   "--out-dir", str(tmp_path / "out")])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert "ai2d: cannot load lmms-lab-encoder/ai2d, split 'test' from the Hugging Face cache" in err
    assert "Traceback" not in err


def test_mme_cut_inside_an_image_pair_reports_no_score_instead_of_a_wrong_one(hf_cache: Path, tmp_path: Path) -> None:
    with ScriptedServer(mm_datasets.rules(), default="zzz") as srv:
        rc = main(["eval", "--model", srv.url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks", "mme",
                   "--limit", "3", "--out-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    res = json.loads(next(tmp_path.glob("*/results/mme.json")).read_text())
    assert "mme_cognition_score" not in res["metrics"] and res["metrics"] == {}  # the 3rd image lacks its pair


def test_wer_applies_whispers_spelling_table_when_one_is_given(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from lmmbench.metrics.accuracy_mm import corpus_wer

    monkeypatch.delenv("LMMBENCH_WHISPER_SPELLING", raising=False)
    monkeypatch.setattr("lmmbench.metrics.accuracy_mm.spelling_mapping_file", lambda: None)
    # 6 reference words; "colour" vs "color" is one substitution without the table
    assert corpus_wer(["THE COLOR OF THE SKY, MISTER"], ["the colour of the sky mr"]) == pytest.approx(100 / 6)
    table = tmp_path / "english.json"
    table.write_text(json.dumps({"colour": "color"}))
    monkeypatch.setattr("lmmbench.metrics.accuracy_mm.spelling_mapping_file", lambda: table)
    assert corpus_wer(["THE COLOR OF THE SKY, MISTER"], ["the colour of the sky mr"]) == 0.0


@pytest.mark.parametrize(("pred", "refs", "want"), [
    ("John Smith", ["john smith"], 1.0),
    ("Jonh Smith", ["John Smith"], 1 - 2 / 10),  # two edits over 10 characters
    ("abc", ["xyz"], 0.0),  # similarity 0 < 0.5
    ("  John   Smith ", ["John Smith"], 1 - 0 / 15),  # distance on collapsed text, length of the raw prediction
])  # fmt: skip
def test_anls_is_lmms_evals_formula(pred: str, refs: list[str], want: float) -> None:
    from lmmbench.metrics.accuracy_mm import anls_lmms

    assert anls_lmms(pred, refs) == pytest.approx(want)


def test_answer_readers_follow_the_benchmarks_rules() -> None:
    from lmmbench.metrics.accuracy_mm import relaxed_correctness, vqa_accuracy, vqa_normalize
    from lmmbench.metrics.mc_parse import extract_mcq_letter

    assert relaxed_correctness("0.12", "12%") and relaxed_correctness("104", "100")
    assert not relaxed_correctness("106", "100") and relaxed_correctness("Yes", "yes")
    assert vqa_normalize("Ten.") == "10" and vqa_normalize("the Exit!") == "exit"
    assert vqa_accuracy("stop", ["stop"] * 2 + ["go"] * 8) == pytest.approx((2 * 1 / 3 + 8 * 2 / 3) / 10)
    assert extract_mcq_letter("The answer is (C).") == "C" and extract_mcq_letter("I cannot tell") == ""
    assert extract_mcq_letter("B") == "B" and extract_mcq_letter("") == ""


def test_the_expected_values_were_made_by_lmms_eval_not_by_lmmbench() -> None:
    assert "lmms-eval 0.7.3's own task functions" in EXPECTED["what"]
    assert set(EXPECTED["tasks"]) == set(TASKS)
    assert os.path.basename(EXPECTED["command"].split()[0]) == "lmms_eval_crosscheck.py"


def test_lmmbench_tasks_lists_the_benchmarks_and_runs_compare_reads_them(
        endpoint_run: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in TASKS) and "lmms-lab-encoder/MMMU validation" in listed
    with ScriptedServer([], default="A") as srv:  # every answer "A": another AI2D score
        assert main(["eval", "--model", srv.url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks", "ai2d",
                     "--out-dir", str(tmp_path)]) == 0  # fmt: skip
    first = json.loads((endpoint_run["run"] / "run.json").read_text())["run_id"]
    second = json.loads(next(tmp_path.glob("*/run.json")).read_text())["run_id"]
    capsys.readouterr()
    assert main(["runs", "compare", first, second]) == 0
    out = capsys.readouterr().out
    assert "ai2d" in out and "exact_match" in out and "0.75" in out  # the baseline's AI2D score


def test_a_resumed_run_skips_answered_samples(hf_cache: Path, tmp_path: Path) -> None:
    with ScriptedServer([], default="A") as srv:  # gold letters B, A, C, C: "A" is right once
        assert main(["eval", "--model", srv.url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks", "ai2d",
                     "--out-dir", str(tmp_path)]) == 0  # fmt: skip
        url = srv.url
    with ScriptedServer([], default="C", port=int(url.rsplit(":", 1)[1].split("/")[0])) as again:  # same URL
        assert main(["eval", "--model", url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks", "ai2d",
                     "--out-dir", str(tmp_path), "--resume", "latest"]) == 0  # fmt: skip
        assert again.requests == []  # nothing asked again ("C" would score 0.5)
    res = json.loads(next(tmp_path.glob("*/results/ai2d.json")).read_text())
    assert res["metrics"]["exact_match"]["value"] == 0.25
