"""Bad input, round 5 (the cases as users met them): each is one ``error:`` line naming the flag or variable, exit 2,
before anything is measured, no traceback; or the right result where the input is legitimate (README's
``perf --tokenizer tiny-llm``). The generated classes behind these cases are in tests/fuzz/test_fuzz_round5.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver


def _tok(tmp: Path) -> str:
    from lmmbench.testing import build_word_tokenizer

    return str(build_word_tokenizer(tmp / "tok", []))


def _serve(tmp: Path, *more: str) -> list[str]:
    return ["bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", _tok(tmp),
            "--random-input-len", "6", "--random-output-len", "3", "--num-prompts", "2", "--result-dir",
            str(tmp / "res"), *more]  # fmt: skip


def _sglang(tmp: Path, *more: str) -> list[str]:
    return ["bench", "sglang", "--port", "9", "--tokenizer", _tok(tmp), "--dataset-name", "random",
            "--random-input-len", "6", "--random-output-len", "3", "--num-prompts", "2", "--output-file",
            str(tmp / "o.jsonl"), *more]  # fmt: skip



@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as u:
        yield u


def _one_line(capsys: pytest.CaptureFixture[str], code: int, *named: str) -> str:
    out = capsys.readouterr()
    errors = [x for x in out.err.splitlines() if x.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in out.err, out.err[-2000:]
    assert all(n in errors[0] for n in named), errors[0]
    return errors[0]


def test_perf_takes_a_built_in_model_as_its_tokenizer_as_the_readme_says(url: str, tmp_path: Path) -> None:
    code = main(["perf", "--url", url, "--tokenizer", "tiny-llm", "--input-tokens", "12", "--output-tokens", "2",
                 "--num-requests", "2", "--no-plots", "--no-progress", "--out-dir", str(tmp_path)])  # fmt: skip
    assert code == 0
    rows = [json.loads(x) for x in next(tmp_path.rglob("records.jsonl")).read_text().splitlines()]
    assert len(rows) == 2 and all(r["input_tokens"] == 12 for r in rows)  # exact lengths: the tokenizer's


def test_a_misspelt_limit_variable_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_LIMIT_NO_SUCH", "5")
    _one_line(capsys, main(["runs", "list"]), "LMMBENCH_LIMIT_NO_SUCH", "CONCURRENCY")


def test_eval_limit_inf_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _one_line(capsys, main(["eval", "--model", "tiny-llm", "--tasks", "sample_qa", "--limit", "inf", "--out-dir",
                            str(tmp_path)]), "limit")  # fmt: skip


def test_a_negative_compare_threshold_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(capsys, main(["runs", "compare", "a", "b", "--threshold", "ttft_ms=-5"]), "--threshold ttft_ms=-5")


def test_a_negative_sglang_ready_wait_and_a_vllm_rate_of_1e_300(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(capsys, main(_sglang(tmp_path / "a", "--ready-check-timeout-sec", "-5")), "--ready-check-timeout-sec")
    _one_line(capsys, main(_serve(tmp_path / "b", "--request-rate", "1e-300")), "--request-rate", "duration_s")


def _f1_task(tmp: Path) -> Path:
    task = tmp / "qa_f1.yaml"
    from lmmbench.evaluation.task_registry import resolve_selection

    qa = resolve_selection(["sample_qa"], []).tasks[0].resolve("data/sample_qa.jsonl")
    task.write_text(f"task: qa_f1\nkind: generate\ndata: {{path: {qa}}}\n"
                    "doc_to_text: 'Q: {{question}}\\nA:'\ndoc_to_target: '{{answers}}'\ngeneration: {max_tokens: 8}\n"
                    "metrics: [f1, exact_match]\n")  # fmt: skip
    return task


@pytest.mark.parametrize("rule", ["f1>=2", "f1>=1e999"])
def test_a_correct_if_no_answer_can_reach_is_refused_before_the_load(rule: str, url: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["perf", "--url", url, "--tasks", str(_f1_task(tmp_path)), "--score", "--correct-if", rule,
                 "--out-dir", str(tmp_path / "out")])  # fmt: skip
    _one_line(capsys, code, "--correct-if")
    assert not (tmp_path / "out" / "perf").exists()


@pytest.mark.parametrize(("models", "named"), [
    ("a=http://127.0.0.1:1,a=http://127.0.0.1:2", "'a' is given twice"),
    ("http://127.0.0.1:1", "expected KEY=VALUE"),
])  # fmt: skip
def test_models_pairs_are_unique_and_a_url_is_never_split_at_its_colon(models: str, named: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _one_line(capsys, main(["perf", "--tasks", "sample_qa", "--models", models]), "--models", named)


def test_a_bad_second_models_entry_is_found_before_the_first_is_measured(url: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["perf", "--tasks", "sample_qa", "--models", f"good={url},bad=http://127.0.0.1:{free_loopback_port()}",
                 "--wait-for-server", "1", "--out-dir", str(tmp_path)])  # fmt: skip
    _one_line(capsys, code, "--models bad")
    assert not (tmp_path / "perf").exists()  # the first model was not measured


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_truncated_reference_npz_is_one_line(cut: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "reference.json").write_text(json.dumps({"format": 2, "model": "tiny-llm", "prompts": []}))
    np.savez_compressed(ref / "reference.npz", first_token_logits=np.random.default_rng(0).normal(size=(4, 512)))
    data = (ref / "reference.npz").read_bytes()
    (ref / "reference.npz").write_bytes(data[: int(len(data) * cut)])
    code = main(["reference", "compare", "--model", "tiny-llm", "--reference", str(ref), "--out-dir",
                 str(tmp_path / "out")])  # fmt: skip
    _one_line(capsys, code, "reference")


def test_reference_dump_out_naming_a_file_is_refused_before_the_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import lmmbench.evaluation.reference.run as run

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(run, "_engine", never)
    (tmp_path / "f").write_text("x")
    _one_line(capsys, main(["reference", "dump", "--model", "tiny-llm", "--out", str(tmp_path / "f")]), "--out")


def test_bench_sglang_output_file_naming_a_folder_is_refused_before_the_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    (tmp_path / "folder").mkdir()
    argv = _sglang(tmp_path, "--ready-check-timeout-sec", "60")
    argv[argv.index("--output-file") + 1] = str(tmp_path / "folder")
    _one_line(capsys, main(argv), "--output-file", "a folder")


def test_num_fewshot_on_lmms_benchmarks_only_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["eval", "--model", f"http://127.0.0.1:{free_loopback_port()}", "--tokenizer", "tiny-vl", "--tasks",
                 "chartqa", "--num_fewshot", "3", "--out-dir", str(tmp_path)])  # fmt: skip
    _one_line(capsys, code, "--num_fewshot", "chartqa")


def test_num_fewshot_beside_an_lmms_benchmark_is_refused_not_half_applied(capsys: pytest.CaptureFixture[str],
                                                                           tmp_path: Path) -> None:
    code = main(["eval", "--model", f"http://127.0.0.1:{free_loopback_port()}", "--tokenizer", "tiny-vl", "--tasks",
                 "sample_mc,chartqa", "--num_fewshot", "3", "--out-dir", str(tmp_path)])  # fmt: skip
    _one_line(capsys, code, "--num_fewshot", "chartqa")
