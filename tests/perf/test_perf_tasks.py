"""Evaluation tasks as a perf workload (AISBench's --mode perf), quality under load, several models per run:
against the real test server, whose answer key answers sample_qa correctly only while few requests are in flight."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.errors import UserError
from lmmbench.core.net import free_loopback_port
from lmmbench.evaluation.task_registry import resolve_selection
from lmmbench.metrics.quality import Answer, mcnemar_exact, point_quality, wilson_interval
from lmmbench.sessions.perf.quality import prepare_task_run
from lmmbench.testing import running_testserver

QA = Path(resolve_selection(["sample_qa"], []).tasks[0].resolve("data/sample_qa.jsonl"))


def _answer_key(path: Path) -> Path:
    """The right answer of every sample_qa question (read from the task's data, not from lmmbench's output)."""
    rows = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    path.write_text(json.dumps({r["question"]: r["answers"][0] for r in rows}))
    return path


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    key = _answer_key(tmp_path_factory.mktemp("key") / "answers.json")
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=2, answers=key, correct_below_inflight=2)
    with running_testserver(cfg) as u:
        yield u


def _received(url: str) -> list[dict[str, Any]]:
    import urllib.request

    with urllib.request.urlopen(url + "/received_full", timeout=5) as resp:
        data: list[dict[str, Any]] = json.loads(resp.read())["received"]
        return data


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _canon(entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry["body"].items() if k not in ("stream", "stream_options")}
    return json.dumps([entry["path"], body], sort_keys=True)


def test_eval_mode_perf_sends_exactly_the_bodies_eval_sends(url: str, tmp_path: Path) -> None:
    tasks = "sample_qa,sample_vqa_count"  # a text completion task and a chat task with images
    before = len(_received(url))
    assert main(["eval", "--model", url, "--tasks", tasks, "--tokenizer", "tiny-llm", "--limit", "6",
                 "--out-dir", str(tmp_path / "eval")]) == 0  # fmt: skip
    mid = len(_received(url))
    assert main(["eval", "--mode", "perf", "--model", url, "--tasks", tasks, "--limit", "6", "--concurrency", "3",
                 "--out-dir", str(tmp_path / "perf")]) == 0  # fmt: skip
    got = _received(url)
    sent_by_eval = [_canon(e) for e in got[before:mid]]
    assert len(sent_by_eval) == 12
    streamed = [e for e in got[mid:] if e["body"].get("stream")]
    sent_by_perf = [_canon(e) for e in streamed if _canon(e) in set(sent_by_eval)]
    assert len(streamed) - len(sent_by_perf) <= 3  # the rest: the preflight's probes ("hello")
    assert Counter(sent_by_perf) == Counter(sent_by_eval)
    assert any("image_url" in s for s in sent_by_perf)  # the images went too
    run = next((tmp_path / "perf" / "perf").iterdir())
    for sub in ("logs", "predictions", "results", "summary"):  # AISBench's layout beside lmmbench's files
        assert (run / sub).is_dir(), sub
    preds = (run / "predictions" / "sample_qa.jsonl").read_text().splitlines()
    assert len(preds) == 6 and "accuracy" not in _rows(run / "summary.csv")[0]  # no scoring in perf mode


def test_score_reports_the_accuracy_drop_under_load_and_mcnemar_flags_it(url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["perf", "--url", url, "--tasks", "sample_qa", "--score", "--concurrencies", "1,8",
                 "--slo", "ttft_ms=5000", "--out-dir", str(out), "--run-name", "q"]) == 0  # fmt: skip
    run = out / "perf" / "q"
    rows = _rows(run / "summary.csv")
    assert [int(r["requests"]) for r in rows] == [20, 20]  # one pass over the task's 20 documents per point
    low, high = (float(r["accuracy"]) for r in rows)
    assert low == 1.0  # one request in flight: the server's answer key answers every question
    assert high <= 0.5  # eight in flight: above the key's limit of two, most answers are filler
    assert rows[0]["accuracy_changed"] == "" and rows[1]["accuracy_changed"] == "True"
    assert float(rows[1]["accuracy_mcnemar_p"]) < 0.01
    assert float(rows[1]["accuracy_ci_low"]) <= high <= float(rows[1]["accuracy_ci_high"]) < 1.0
    preds = [json.loads(x) for x in (run / "predictions" / "sample_qa.jsonl").read_text().splitlines()]
    assert len(preds) == 40
    correct_at_8 = sum(1 for p in preds if p["point"] == 1 and p["correct"])
    assert correct_at_8 == round(high * 20)
    # goodput counts a request only when it met the SLO AND was answered correctly
    dur = float(rows[1]["duration_s"])
    assert math.isclose(float(rows[1]["correct_goodput_qps"]) * dur, correct_at_8, rel_tol=1e-6)
    assert math.isclose(float(rows[1]["goodput_qps"]) * dur, 20, rel_tol=1e-6)
    report = json.loads((run / "report.json").read_text())
    assert [p["accuracy"] for p in report["quality"]] == [low, high]
    assert (run / "results" / "quality.json").is_file() and (run / "summary" / "quality.csv").is_file()
    assert (run / "quality_vs_load.png").is_file()
    assert "Accuracy against load" in (run / "report.html").read_text(encoding="utf-8")
    # the run store and `runs compare` carry accuracy per load point
    from lmmbench.core.runs.log import load_run_log
    from lmmbench.sessions.run_samples import load_samples

    run_log = load_run_log(run / "run.json")
    assert run_log.headline["accuracy [point 0]"] == 1.0 and run_log.headline["accuracy [point 1]"] == high
    samples = load_samples(run_log, run).per_sample
    acc = {g: v["accuracy"] for g, v in samples.items() if "accuracy" in v}
    assert sorted(len(v) for v in acc.values()) == [20, 20]
    assert sorted(sum(v) for v in acc.values()) == [correct_at_8, 20]
    assert main(["runs", "compare", str(run), str(run)]) == 0


def test_a_duration_point_that_outlasts_the_tasks_starts_numbered_passes(url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["perf", "--url", url, "--tasks", "sample_qa", "--task-limit", "3", "--score", "--concurrency", "1",
                 "--duration-s", "0.6", "--out-dir", str(out), "--run-name", "d"]) == 0  # fmt: skip
    preds = [json.loads(x) for x in (out / "perf" / "d" / "predictions" / "sample_qa.jsonl").read_text().splitlines()]
    assert len(preds) > 3 and max(p["pass"] for p in preds) >= 1
    assert {p["doc_id"] for p in preds} == {0, 1, 2}
    assert [p["doc_id"] for p in preds[:6]] == [0, 1, 2, 0, 1, 2]
    row = _rows(out / "perf" / "d" / "summary.csv")[0]
    assert row["accuracy_docs"] == "3" and int(row["accuracy_requests_sent"]) == len(preds)  # interval over documents


def test_accuracy_under_load_counts_every_request_sent(tmp_path: Path) -> None:
    # the test server fails exactly 3 of every 10 requests with HTTP 500; one in flight, so every answer is right
    key = _answer_key(tmp_path / "answers.json")
    cfg = TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1, answers=key, correct_below_inflight=2,
                           faults={"http_500": 0.3})  # fmt: skip
    out = tmp_path / "out"
    with running_testserver(cfg) as u:
        assert main(["perf", "--url", u, "--tasks", "sample_qa", "--score", "--concurrency", "1", "--no-plots",
                     "--no-progress", "--out-dir", str(out), "--run-name", "faults"]) == 0  # fmt: skip
    run = out / "perf" / "faults"
    row = _rows(run / "summary.csv")[0]
    assert int(row["requests"]) == 20 and int(row["accuracy_requests_failed"]) == 6  # 3 of every 10 of 20 sent
    assert float(row["accuracy"]) == 14 / 20 == 0.7  # correct / sent, exactly
    assert float(row["accuracy_over_answered"]) == 1.0 and int(row["accuracy_requests_answered"]) == 14
    low, high = wilson_interval(14, 20) or (0.0, 0.0)  # over the 20 documents sent, not the 14 answered
    assert float(row["accuracy_ci_low"]) == pytest.approx(low, rel=1e-9)
    assert float(row["accuracy_ci_high"]) == pytest.approx(high, rel=1e-9) and high < 1.0
    preds = [json.loads(x) for x in (run / "predictions" / "sample_qa.jsonl").read_text().splitlines()]
    failed = [p for p in preds if p["error"]]
    assert len(failed) == 6 and all(p["correct"] is False for p in failed)
    from lmmbench.core.runs.log import load_run_log

    assert load_run_log(run).headline["accuracy"] == 0.7


def test_two_models_in_one_run_give_two_run_folders_and_one_table(url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["perf", "--models", f"a={url},b={url}/v1", "--tasks", "sample_qa", "--task-limit", "4",
                 "--concurrency", "2", "--out-dir", str(out)]) == 0  # fmt: skip
    assert sorted(p.name for p in (out / "perf").iterdir()) == ["a", "b", "models_comparison.csv"]
    table = _rows(out / "perf" / "models_comparison.csv")
    assert [(r["model"], r["requests"]) for r in table] == [("a", "4"), ("b", "4")]
    assert all(Path(r["run_dir"]).is_dir() for r in table)


def test_eval_models_gives_a_run_folder_per_model_and_one_table(url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["eval", "--models", f"tiny-llm,{url}", "--tasks", "sample_qa", "--limit", "3", "--tokenizer",
                 "tiny-llm", "--out-dir", str(out)]) == 0  # fmt: skip
    host = url.removeprefix("http://").replace(":", "_")
    assert sorted(p.name for p in out.iterdir()) == sorted([host, "models_comparison.csv", "tiny-llm"])
    for folder in ("tiny-llm", host):
        runs = [p for p in (out / folder).iterdir() if (p / "results" / "sample_qa.json").is_file()]
        assert len(runs) == 1, folder
    table = _rows(out / "models_comparison.csv")
    assert {(r["model"], r["metric"]) for r in table} >= {("tiny-llm", "exact_match"), (url, "exact_match")}
    endpoint = next(r for r in table if r["model"] == url and r["metric"] == "exact_match")
    assert float(endpoint["value"]) == 0.0 and endpoint["n"] == "3"  # the server's filler answers (non-streamed)


def test_log_likelihood_tasks_are_refused_where_the_endpoint_lacks_prompt_logprobs(
        url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["perf", "--url", url, "--tasks", "sample_mc", "--tokenizer", str(_tiny_llm_dir()),
                 "--out-dir", str(tmp_path)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "does not answer echo + logprobs" in err and "Traceback" not in err
    assert not (tmp_path / "perf").exists() or not any((tmp_path / "perf").iterdir())


def _tiny_llm_dir() -> Path:
    from lmmbench.models import resolve_model

    return Path(resolve_model("tiny-llm").path)


def test_score_needs_correct_if_for_a_continuous_metric(tmp_path: Path) -> None:
    task = tmp_path / "qa_f1.yaml"
    task.write_text(f"task: qa_f1\nkind: generate\ndata: {{path: {QA}}}\ndoc_to_text: 'Q: {{{{question}}}}\\nA:'\n"
                    "doc_to_target: '{{answers}}'\ngeneration: {max_tokens: 8}\nmetrics: [f1, exact_match]\n")
    with pytest.raises(UserError, match=r"continuous.*--correct-if f1>=X"):
        prepare_task_run(PerfConfig(tasks=[str(task)], score=True))
    _cfg, _reqs, quality = prepare_task_run(PerfConfig(tasks=[str(task)], score=True, correct_if="f1>=0.5"))
    doc = quality.workload.docs[0]  # "What is the capital of France?" -> Paris
    assert quality._correct(doc, " Paris is it") == (True, pytest.approx(0.5))  # F1: precision 1/3, recall 1
    assert quality._correct(doc, " Paris is it not") == (False, pytest.approx(0.4))  # 1/4 and 1
    assert quality._correct(doc, " Lyon") == (False, 0.0)
    with pytest.raises(ValueError, match="act on --tasks"):
        PerfConfig(score=True)
    with pytest.raises(UserError, match="drop --input-tokens"):
        prepare_task_run(PerfConfig(tasks=["sample_qa"], input_tokens=64))
    with pytest.raises(UserError, match="drop --endpoint"):  # each request goes to the API eval sends it to
        prepare_task_run(PerfConfig(tasks=["sample_qa"], endpoint="completions"))
    with pytest.raises(UserError, match="--no-keep-text"):
        prepare_task_run(PerfConfig(tasks=["sample_qa"], keep_text=False))


def test_mcnemar_and_wilson_against_hand_computed_values() -> None:
    assert mcnemar_exact(16, 0) == pytest.approx(2 / 2**16)  # every discordant pair one way
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 5) == pytest.approx(2 * (1 + 6) / 64)
    lo, hi = wilson_interval(0, 20) or (None, None)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)  # the textbook 0/20 Wilson bound
    first = [Answer(("t", d), 0, True, True) for d in range(10)]
    later = [Answer(("t", d), 0, d < 2, True) for d in range(10)] + [Answer(("t", 0), 1, False, True)]
    q = point_quality(later, 2.0, first)
    assert (q.mcnemar_b, q.mcnemar_c, q.paired_docs) == (8, 0, 10)  # the first answer of doc 0 counts (pass 0)
    assert q.accuracy == pytest.approx(2 / 11) and q.docs == 10 and q.correct_goodput_qps == pytest.approx(1.0)
    assert q.changed is True


def _offline_hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HOME under ``tmp_path``, offline, also in `datasets` / `huggingface_hub` (they read it at import)."""
    from lmmbench.testing.hf_datasets import use_offline_cache

    home = tmp_path / "hf"
    use_offline_cache(monkeypatch, home)
    return home


@pytest.fixture
def gsm8k_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """openai/gsm8k (config main) in the `datasets` cache, read offline (lm-eval's gsm8k task, unchanged)."""
    from lmmbench.testing.hf_datasets import write_dataset_cache

    home = _offline_hf(tmp_path, monkeypatch)
    gsm = [{"question": f"What is {i} plus {i}?", "answer": f"{i} plus {i} is {2 * i}.\n#### {2 * i}"}
           for i in range(12)]  # fmt: skip
    write_dataset_cache(home, "openai/gsm8k", "main", {"train": gsm[:8], "test": gsm[8:]})
    return home


def _same_bodies_as_eval(url: str, tmp_path: Path, args: list[str], n: int) -> Path:
    """Run `eval` and `eval --mode perf` with ``args``; the streamed bodies of the second equal the first's."""
    before = len(_received(url))
    assert main(["eval", "--model", url, *args, "--out-dir", str(tmp_path / "eval")]) == 0
    mid = len(_received(url))
    assert main(["eval", "--mode", "perf", "--model", url, *args, "--out-dir", str(tmp_path / "perf")]) == 0
    got = _received(url)
    sent_by_eval = [_canon(e) for e in got[before:mid]]
    assert len(sent_by_eval) == n
    sent_by_perf = [_canon(e) for e in got[mid:] if e["body"].get("stream") and _canon(e) in set(sent_by_eval)]
    assert Counter(sent_by_perf) == Counter(sent_by_eval)
    return next((tmp_path / "perf" / "perf").iterdir())


def test_eval_mode_perf_on_a_catalogue_task_sends_the_bodies_eval_sends(url: str, tmp_path: Path,
                                                                         gsm8k_offline: Path) -> None:  # fmt: skip
    pytest.importorskip("lm_eval")
    run = _same_bodies_as_eval(url, tmp_path, ["--tasks", "gsm8k", "--limit", "3", "--gen-kwargs", "max_gen_toks=8",
                                               "--tokenizer", "tiny-llm"], 3)  # fmt: skip
    preds = [json.loads(x) for x in (run / "predictions" / "gsm8k.jsonl").read_text().splitlines()]
    assert sorted(p["doc_id"] for p in preds) == [0, 1, 2]


def test_eval_mode_perf_on_an_lmms_benchmark_sends_the_bodies_eval_sends(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from lmmbench.testing import mm_datasets

    mm_datasets.write_all(_offline_hf(tmp_path, monkeypatch), tasks=["chartqa"])
    run = _same_bodies_as_eval(url, tmp_path, ["--tasks", "chartqa", "--limit", "3", "--tokenizer", "tiny-vl"], 3)
    preds = [json.loads(x) for x in (run / "predictions" / "chartqa.jsonl").read_text().splitlines()]
    assert sorted(p["doc_id"] for p in preds) == [0, 1, 2]


EVAL_OPTIONS = [  # (eval's spelling, perf's spelling) of each prompt / generation option, with a value
    (["--num_fewshot", "2"], ["--num-fewshot", "2"]),
    (["--gen_kwargs", "max_gen_toks=5,temperature=0"], ["--gen-kwargs", "max_gen_toks=5,temperature=0"]),
    (["--system_instruction", "Be brief."], ["--system-instruction", "Be brief."]),
    (["--seed", "7"], ["--seed", "7"]),
    (["--prompt", "qa@1"], ["--prompt", "qa@1"]),
]


@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat-template"])
def test_perf_tasks_takes_evals_prompt_and_generation_options(url: str, tmp_path: Path, chat: bool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # ./prompts/qa@1.txt: the registered prompt of --prompt qa@1
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "qa@1.txt").write_text("Q: {{question}}\nA:")
    chat_opts = (["--apply_chat_template", "--fewshot_as_multiturn"], ["--apply-chat-template",
                                                                       "--fewshot-as-multiturn"])  # fmt: skip
    ev = [a for e, _ in EVAL_OPTIONS for a in e] + (chat_opts[0] if chat else [])
    pf = [a for _, p in EVAL_OPTIONS for a in p] + (chat_opts[1] if chat else [])
    before = len(_received(url))
    assert main(["eval", "--model", url, "--tasks", "sample_qa", "--tokenizer", "tiny-llm", "--limit", "4", *ev,
                 "--out-dir", str(tmp_path / "eval")]) == 0  # fmt: skip
    mid = len(_received(url))
    from lmmbench.models import resolve_model

    tok = str(resolve_model("tiny-llm").path)  # perf's --tokenizer is a folder
    assert main(["perf", "--url", url, "--tasks", "sample_qa", "--task-limit", "4", "--tokenizer", tok, *pf,
                 "--concurrency", "2", "--out-dir", str(tmp_path / "perf"), "--run-name", "o"]) == 0  # fmt: skip
    got = _received(url)
    by_eval = Counter(_canon(e) for e in got[before:mid])
    by_perf = Counter(_canon(e) for e in got[mid:] if e["body"].get("stream") and _canon(e) in by_eval)
    assert sum(by_eval.values()) == 4 and by_perf == by_eval
    bodies = [e["body"] for e in got[before:mid]]
    assert all(b["max_tokens"] == 5 for b in bodies)  # the options acted (not eval's defaults)
    text = json.dumps(bodies)
    assert "Be brief." in text and "Q: " in text and (("messages" in bodies[0]) == chat)


def test_perf_prompt_options_without_tasks_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "--url", "http://127.0.0.1:9", "--gen-kwargs", "max_gen_toks=5", "--num-requests", "1"]) == 2
    assert "--gen-kwargs act on --tasks" in capsys.readouterr().err
