"""Bad input, round 5 (issue 62), the cases left after tests/reliability/test_bad_input_round5.py: each is one
``error:`` line naming the file, row, field or flag, exit 2, before anything expensive, no traceback; or the right
result where the input is legitimate. Their generated classes are in tests/fuzz/test_fuzz_round5_rest.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver

FIXTURES = Path(__file__).parents[1] / "runs" / "fixtures"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=1, itl_ms=1)) as u:
        yield u

OLD = {"sample_id": "old", "status": "ok", "visual_encoder_ms": "10", "audio_encoder_ms": "5", "prefill_ms": "21",
       "llm_prefill_ms": "20", "others_ms": "14", "ttft_ms": "50", "others_embedding_merge_ms": "3",
       "others_position_ids_ms": "2", "others_lm_head_ms": "1"}  # fmt: skip
# today's row: prefill = llm 20 + merge 3 + rope 2 + lm_head 1 + glue 1 = 27, others = 50 - 15 - 27 = 8
NEW = {"sample_id": "new", "status": "ok", "visual_encoder_ms": "10", "audio_encoder_ms": "5", "prefill_ms": "27",
       "llm_prefill_ms": "20", "others_ms": "8", "ttft_ms": "50", "prefill_merge_ms": "3",
       "prefill_rope_index_ms": "2", "prefill_lm_head_ms": "1", "prefill_forward_glue_ms": "1"}  # fmt: skip


def _one_line(capsys: pytest.CaptureFixture[str], code: int, *named: str) -> str:
    out = capsys.readouterr()
    errors = [x for x in out.err.splitlines() if x.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in out.err, out.err[-2000:]
    assert all(n in errors[0] for n in named), errors[0]
    return errors[0]


def _spec_run(folder: Path, rows: list[dict[str, str]]) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "spec_v1_run.json", folder / "run.json")
    cols = list(dict.fromkeys(k for r in rows for k in r))  # one header over both sets, as a concatenation gives
    lines = [",".join(cols)] + [",".join(r.get(c, "") for c in cols) for r in rows]
    (folder / "ttft-breakdown_results.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_a_file_holding_old_and_new_breakdown_columns_reads_each_row_in_its_own_layout(tmp_path: Path) -> None:
    from lmmbench.core.runs.log import load_run_log
    from lmmbench.sessions.run_samples import load_samples

    folder = _spec_run(tmp_path / "both", [OLD, NEW, {**NEW, "sample_id": "new2", "prefill_ms": "29",
                                                      "prefill_forward_glue_ms": "3", "others_ms": "6"}])
    samples = load_samples(load_run_log(folder), folder).per_sample["all"]
    # the old row upgraded (21 + 3 + 2 + 1), today's rows as written: the same quantity on every row
    assert sorted(samples["prefill_ms"]) == [27.0, 27.0, 29.0]
    assert sorted(samples["others_ms"]) == [6.0, 8.0, 8.0]
    assert sorted(samples["prefill_merge_ms"]) == [3.0, 3.0, 3.0]
    assert sorted(samples["prefill_forward_glue_ms"]) == [1.0, 1.0, 3.0]
    assert not any(k.startswith("others_embedding") for k in samples)


def test_old_and_new_results_concatenated_with_cat_are_each_read_under_their_own_header(tmp_path: Path) -> None:
    from lmmbench.core.runs.log import load_run_log
    from lmmbench.sessions.run_samples import load_samples

    old = _spec_run(tmp_path / "old", [OLD]) / "ttft-breakdown_results.csv"
    new = _spec_run(tmp_path / "new", [{**NEW, "sample_id": "n1"}, {**NEW, "sample_id": "n2", "ttft_ms": "52",
                                                                   "others_ms": "10"}]) / "ttft-breakdown_results.csv"
    old.write_text(old.read_text() + new.read_text())  # `cat old new > old`: the new header repeats inside
    log = load_run_log(old.parent)
    samples = load_samples(log, old.parent).per_sample["all"]
    assert sorted(samples["prefill_ms"]) == [27.0, 27.0, 27.0] and sorted(samples["ttft_ms"]) == [50.0, 50.0, 52.0]
    assert sorted(samples["others_ms"]) == [8.0, 8.0, 10.0]
    assert log.headline["prefill_ms_median"] == pytest.approx(27.0)  # the run's headline reads them alike


def test_a_negative_duration_in_a_results_file_is_one_line_naming_the_file_and_row(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    a = _spec_run(tmp_path / "a", [NEW, {**NEW, "sample_id": "s2"}])
    b = _spec_run(tmp_path / "b", [NEW, {**NEW, "sample_id": "edited", "prefill_ms": "-5"}])
    line = _one_line(capsys, main(["runs", "compare", str(a), str(b)]), "ttft-breakdown_results.csv", "line 3",
                     "prefill_ms", "-5")
    assert "edited" in line
    # an old row whose sums would hide the edit (-5 + 3 + 2 + 1 = 1) is refused as well
    c = _spec_run(tmp_path / "c", [OLD, {**OLD, "sample_id": "old2", "prefill_ms": "-5"}])
    _one_line(capsys, main(["runs", "compare", str(a), str(c)]), str(c), "line 3", "prefill_ms")


@pytest.mark.parametrize(("flags", "named"), [
    (["--seq-lens", "40000"], ("--seq-lens 40000", "32768 positions")),
    (["--seq-lens", "32768"], ("--seq-lens 32768", "the decode step adds one")),  # 32768 + 1 positions > 32768
    (["--seq-lens", "32000", "--batch-sizes", "100000"], ("--batch-sizes 100000", "GiB")),  # ~1.5 TiB of KV cache
    (["--seq-lens", "32000", "--context-batch-sizes", "100000", "--phases", "context"],
     ("--context-batch-sizes 100000", "GiB")),
    (["--model", "tiny-omni"], ("--model tiny-omni", "text model")),
])  # fmt: skip
def test_model_bench_refuses_what_config_json_rules_out_before_the_model_loads(
        flags: list[str], named: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import lmmbench.specs.model_bench as mb

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(mb, "load_spec_model", never)
    code = main(["run", "model-bench", "--model", "tiny-llm", "--batch-sizes", "1", "--max-iters", "1", *flags,
                 "--out-dir", str(tmp_path)])  # fmt: skip
    _one_line(capsys, code, *named)


def test_model_bench_takes_a_seq_len_that_fits_exactly_without_decode(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from lmmbench.specs.model_bench import ModelBenchOptions, check_before_loading

    # context alone needs seq_len positions: 32768 is the tiny model's last one, so it is no error
    check_before_loading(ModelBenchOptions(seq_lens=[32768], batch_sizes=[1], phases=["context"]))


def test_resuming_a_ttft_breakdown_of_the_old_layout_is_one_line_before_the_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import lmmbench.specs.experiment_support as support
    import lmmbench.specs.ttft_breakdown as tb

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("set-up started: the model or the media would be loaded")

    monkeypatch.setattr(support, "load_spec_model", never)
    monkeypatch.setattr(tb.TTFTBreakdownSpec, "setup", never)
    old = {"spec": "ttft-breakdown", "group": "", "repeat": "0", "error": "", "measured_at": "2026-11-23T18:00:00Z",
           **OLD}  # fmt: skip
    folder = _spec_run(tmp_path / "out" / "ttft-breakdown", [old, {**old, "sample_id": "b"}])
    results = folder / "ttft-breakdown_results.csv"
    before = results.read_bytes()
    code = main(["run", "ttft-breakdown", "--model", "tiny-omni", "--resume", "--out-dir", str(tmp_path / "out")])
    _one_line(capsys, code, str(results), "--resume", "others_embedding_merge_ms", "prefill_merge_ms")
    assert results.read_bytes() == before  # the old run is left as it was


def _chat_tok(tmp: Path) -> str:
    import json

    from lmmbench.testing import build_word_tokenizer

    folder = build_word_tokenizer(tmp / "tok", [])
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    return str(folder)


@pytest.mark.parametrize("turns", ["[null]", "[5]", '[{"text": "hi"}]'])
def test_spec_bench_rows_whose_first_turn_is_no_text_are_one_line(turns: str, url: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "question.jsonl"
    data.write_text(f'{{"turns": ["a question"]}}\n{{"category": "x", "turns": {turns}}}\n')
    serve = ["bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", _chat_tok(tmp_path),
             "--dataset-name", "spec_bench", "--dataset-path", str(data), "--num-prompts", "2", "--result-dir",
             str(tmp_path / "res")]  # fmt: skip
    _one_line(capsys, main(serve), f"{data}:2", "turns[0]")
    perf = ["perf", "--url", url, "--model", "test-model", "--dataset", "spec_bench", "--dataset-path",
            str(data), "--num-requests", "2", "--out-dir", str(tmp_path / "out")]  # fmt: skip
    _one_line(capsys, main(perf), f"{data}:2", "turns[0]")
    assert not any((tmp_path / "out").rglob("*.jsonl"))  # nothing was measured


SGLANG_ROWS = [  # (data-set name, file suffix, content, what the line names)
    ("speed-bench", "jsonl", '{"turns": ["hi there"]}\n{"turns": null}\n', (":2", "'turns' is NoneType")),
    ("speed-bench", "jsonl", '{"turns": ["hi there"]}\n{"turns": [7]}\n', (":2", "turns[0]")),
    ("speed-bench", "jsonl", '["hi there"]\n', (":1", "list, expected a JSON object")),
    ("openai", "jsonl", '{"messages": "hi there"}\n', (":1", "'messages' is str")),
    ("openai", "jsonl", '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "8"}\n',
     (":1", "'max_tokens' '8'")),
    ("openai", "jsonl", '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": true}\n',
     (":1", "'max_tokens' True")),
    ("openai", "jsonl", '[{"role": "user", "content": "hi"}]\n', (":1", "expected a JSON object")),
    ("agentic-trace", "json", '{"conversations": {"a": [{"messages": []}]}}', ("'conversations' is dict",)),
    ("agentic-trace", "json", '{"conversations": [{"messages": [{"role": "user", "content": "hi"}]}]}',
     ("conversations[0] is dict",)),
    ("agentic-trace", "json", '{"conversations": [[{"messages": "hi", "prompt_tokens": 3}]]}',
     ("conversations[0][0].messages is str",)),
    ("agentic-trace", "json", '{"conversations": [[{"messages": [{"role": "user", "content": "hi"}], '
     '"prompt_tokens": "3"}]]}', ("conversations[0][0].prompt_tokens '3'",)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "suffix", "content", "named"), SGLANG_ROWS,
                         ids=[f"{n}-{i}" for i, (n, *_) in enumerate(SGLANG_ROWS)])  # fmt: skip
def test_sglang_data_set_rows_of_the_wrong_type_are_one_line(name: str, suffix: str, content: str,
                                                             named: tuple[str, ...], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    data = tmp_path / f"rows.{suffix}"
    data.write_text(content)
    backend = "sglang-oai-chat"
    code = main(["bench", "sglang", "--port", "9", "--backend", backend, "--tokenizer", _chat_tok(tmp_path),
                 "--dataset-name", name, "--dataset-path", str(data), "--num-prompts", "2", "--output-file",
                 str(tmp_path / "o.jsonl")])  # fmt: skip
    _one_line(capsys, code, str(data), *named)


def test_bench_serve_takes_a_built_in_model_as_its_tokenizer_as_perf_does(url: str, tmp_path: Path) -> None:
    import json

    from lmmbench.models.tiny import build_tiny_model

    port = url.rsplit(":", 1)[1].split("/")[0]
    code = main(["bench", "serve", "--model", "test-model", "--port", port, "--tokenizer", "tiny-llm",
                 "--random-input-len", "12", "--random-output-len", "2", "--num-prompts", "3", "--save-result",
                 "--result-dir", str(tmp_path), "--result-filename", "r.json"])  # fmt: skip
    assert code == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["completed"] == 3 and result["total_input_tokens"] == 3 * 12  # lengths in tiny-llm's ids
    assert result["tokenizer_id"] == str(build_tiny_model("tiny-llm"))  # the built model's folder was read


def test_a_negative_time_in_a_perf_records_file_is_one_line_naming_its_line(url: str, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import json

    folders = []
    for side in ("a", "b"):
        assert main(["perf", "--url", url, "--model", "test-model", "--input-tokens", "8", "--output-tokens", "2",
                     "--num-requests", "3", "--no-plots", "--no-progress", "--out-dir", str(tmp_path / side)]) == 0
        folders.append(next((tmp_path / side).rglob("records.jsonl")).parent)
    records = folders[1] / "records.jsonl"
    rows = [json.loads(x) for x in records.read_text().splitlines()]
    rows[1]["ttft_ms"] = -5  # a hand edit
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    _one_line(capsys, main(["runs", "compare", str(folders[0]), str(folders[1])]), f"{records} line 2", "ttft_ms")
