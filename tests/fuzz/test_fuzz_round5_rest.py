"""Generators for the classes of bad input issue 62 found that tests/fuzz/test_fuzz_round5.py does not draw, each
drawing its own inputs from a seeded generator rather than the cases users met (those are in
tests/reliability/test_bad_input_round5_rest.py):

- TTFT breakdown results holding old and new rows (one header over both sets, or files concatenated with their
  headers): every row is read in its own layout, the sums computed here from the injected parts;
- negative durations anywhere in a results file: one ``error:`` line naming the file, the line and the column.
"""

from __future__ import annotations

import os
import random
import shutil
import string
from pathlib import Path

import pytest

from lmmbench.cli.main import main

SEED = 62
FIXTURES = Path(__file__).parents[1] / "runs" / "fixtures"
LEGACY = ("others_embedding_merge_ms", "others_position_ids_ms", "others_lm_head_ms")
TODAY = ("prefill_merge_ms", "prefill_rope_index_ms", "prefill_lm_head_ms")


def _breakdown(rng: random.Random, i: int, old: bool) -> tuple[dict[str, str], float, float]:
    """(a results row, its prefill and others in the TTFT study's terms): drawn parts, the row written in the
    old layout (the parts under others_*, prefill = LLM forward + glue) or today's."""
    visual, audio, llm, glue = (round(rng.uniform(0.5, 80), 3) for _ in range(4))
    parts = [round(rng.uniform(0.01, 9), 3) for _ in range(3)]
    rest = round(rng.uniform(1, 40), 3)
    prefill = llm + glue + sum(parts)
    row = {"sample_id": f"s{i}", "status": "ok", "visual_encoder_ms": f"{visual}", "audio_encoder_ms": f"{audio}",
           "llm_prefill_ms": f"{llm}", "ttft_ms": f"{visual + audio + prefill + rest:.6f}"}  # fmt: skip
    if old:
        row |= {"prefill_ms": f"{llm + glue:.6f}", "others_ms": f"{rest + sum(parts):.6f}"}
        row |= {k: f"{v}" for k, v in zip(LEGACY, parts, strict=True)}
    else:
        row |= {"prefill_ms": f"{prefill:.6f}", "others_ms": f"{rest}", "prefill_forward_glue_ms": f"{glue}"}
        row |= {k: f"{v}" for k, v in zip(TODAY, parts, strict=True)}
    return row, prefill, rest


def _csv(rows: list[dict[str, str]], cols: list[str]) -> str:
    return "".join(",".join(r.get(c, "") for c in cols) + "\n" for r in [dict(zip(cols, cols, strict=True)), *rows])


def _folder(tmp: Path, text: str) -> Path:
    tmp.mkdir(parents=True)
    shutil.copy(FIXTURES / "spec_v1_run.json", tmp / "run.json")
    (tmp / "ttft-breakdown_results.csv").write_text(text)
    return tmp


@pytest.mark.timeout(120)
def test_generated_mixed_layouts_read_every_row_in_its_own_layout(tmp_path: Path) -> None:
    from lmmbench.core.runs.log import load_run_log
    from lmmbench.sessions.run_samples import load_samples

    rng = random.Random(SEED)
    for draw in range(12):
        drawn = [_breakdown(rng, i, rng.random() < 0.5) for i in range(rng.randint(2, 9))]
        rows = [r for r, _, _ in drawn]
        if draw % 2:  # one header over both sets, in a drawn column order
            cols = sorted({k for r in rows for k in r}, key=lambda _: rng.random())
            text = _csv(rows, cols)
        else:  # each piece under its own header, as `cat a.csv b.csv` leaves it
            cut = rng.randint(1, len(rows) - 1)
            text = "".join(_csv(part, sorted({k for r in part for k in r}, key=lambda _: rng.random()))
                           for part in (rows[:cut], rows[cut:]))  # fmt: skip
        folder = _folder(tmp_path / str(draw), text)
        got = load_samples(load_run_log(folder), folder).per_sample["all"]
        for name, want in (("prefill_ms", [p for _, p, _ in drawn]), ("others_ms", [o for _, _, o in drawn])):
            assert sorted(got[name]) == pytest.approx(sorted(want), abs=1e-4), (draw, name, text)
        assert not set(LEGACY) & set(got), (draw, text)


@pytest.mark.timeout(300)
def test_generated_negative_durations_are_one_line_naming_file_line_and_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    rng = random.Random(SEED)
    logs = Path(os.environ["LMMBENCH_HOME"]) / "logs"
    for draw in range(6):
        rows = [_breakdown(rng, i, rng.random() < 0.5)[0] for i in range(rng.randint(2, 6))]
        base = _folder(tmp_path / f"a{draw}", _csv(rows, sorted({k for r in rows for k in r})))
        at = rng.randrange(len(rows))
        column = rng.choice([k for k in rows[at] if k.endswith("_ms")])
        rows[at][column] = rng.choice(["-5", f"-{rng.random():.4f}", f"-1e{rng.randint(-6, 6)}", "-0.001"])
        edited = _folder(tmp_path / f"b{draw}", _csv(rows, sorted({k for r in rows for k in r})))
        sides = [str(base), str(edited)]
        rng.shuffle(sides)
        crashes = set(logs.glob("crash-*")) if logs.is_dir() else set()
        code = main(["runs", "compare", *sides])
        out = capsys.readouterr()
        errors = [x for x in out.err.splitlines() if x.startswith("error:")]
        assert code == 2 and len(errors) == 1 and "Traceback" not in out.err, out.err[-2000:]
        assert str(edited) in errors[0] and f"line {at + 2}" in errors[0] and column in errors[0], errors[0]
        assert (set(logs.glob("crash-*")) if logs.is_dir() else set()) == crashes


@pytest.mark.timeout(300)
def test_generated_model_bench_sizes_the_model_cannot_take_are_refused_before_it_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """tiny-llm: 32768 positions; its KV cache holds 512 bytes a token (2 x 2 layers x 2 heads x 16 x 4 bytes)."""
    import lmmbench.specs.model_bench as mb

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(mb, "load_spec_model", never)
    rng = random.Random(SEED)
    for draw in range(6):
        phases = rng.choice(["context", "decode", "context,decode"])
        seqs = [rng.randint(1, 4096) for _ in range(rng.randint(0, 3))]
        if draw % 2:  # past the positions (decode: one more than the sequence)
            seqs.append(rng.randint(32769 if phases == "context" else 32768, 10**6))
            named = "--seq-lens"
            batches = [rng.randint(1, 8)]
        else:  # a cell of more than 1.3 TiB of KV cache (within the batch_size limit, 100000)
            seqs.append(rng.randint(30000, 32000))
            batches = [rng.randint(1, 8), 100_000 - rng.randint(0, 1000)]
            named = "--batch-sizes" if phases != "context" else "--context-batch-sizes"
        rng.shuffle(seqs)
        flag = "--context-batch-sizes" if phases == "context" else "--batch-sizes"
        code = main(["run", "model-bench", "--model", "tiny-llm", "--phases", phases, "--seq-lens",
                     ",".join(map(str, seqs)), flag, ",".join(map(str, batches)), "--max-iters", "1",
                     "--out-dir", str(tmp_path / str(draw))])  # fmt: skip
        out = capsys.readouterr()
        errors = [x for x in out.err.splitlines() if x.startswith("error:")]
        assert code == 2 and len(errors) == 1 and named in errors[0], out.err[-2000:]


@pytest.mark.timeout(300)
def test_generated_results_headers_a_resume_cannot_continue_are_refused_before_set_up(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Headers of today's columns with some dropped or renamed to an old name: one line naming the file and a
    column, nothing loaded, the file untouched."""
    import lmmbench.specs.ttft_breakdown as tb
    from lmmbench.specs import BASE_COLUMNS

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("set-up started")

    monkeypatch.setattr(tb.TTFTBreakdownSpec, "setup", never)
    rng = random.Random(SEED)
    today = [*BASE_COLUMNS, *tb.BREAKDOWN_COLUMNS]
    for draw in range(6):
        header = list(today)
        gone = rng.sample(header, rng.randint(1, 4))
        for col in gone:
            header.remove(col)
        if draw % 2:  # an old name where today's stands
            old, new = rng.choice([(o, n) for o, n in zip(LEGACY, TODAY, strict=True) if n in header] or [("", "")])
            if new:
                header[header.index(new)] = old
                gone.append(new)
        rng.shuffle(header)
        spec_dir = tmp_path / str(draw) / "ttft-breakdown"
        spec_dir.mkdir(parents=True)
        results = spec_dir / "ttft-breakdown_results.csv"
        results.write_text(",".join(header) + "\n" + ",".join("1" for _ in header) + "\n")
        out_dir = str(tmp_path / str(draw))
        code = main(["run", "ttft-breakdown", "--model", "tiny-llm", "--resume", "--out-dir", out_dir])
        out = capsys.readouterr()
        errors = [x for x in out.err.splitlines() if x.startswith("error:")]
        assert code == 2 and len(errors) == 1 and str(results) in errors[0], out.err[-2000:]
        assert any(c in errors[0] for c in gone), (gone, errors[0])
        assert results.read_text().startswith(",".join(header) + "\n")


def _wrong(rng: random.Random, *, not_text: bool = True) -> object:
    """A JSON value of a type no text field (``not_text``) or list field takes."""
    kinds: list[object] = [None, rng.randint(-9, 10**6), rng.random() * 100, rng.choice([True, False]),
                           {"text": "x" * rng.randint(1, 5)}]  # fmt: skip
    if not not_text:
        kinds.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8))))
    return rng.choice(kinds)


def _data_set_rows(rng: random.Random, kind: str) -> tuple[str, str, str, int]:
    """(file text, file suffix, what the error names, the bad row's line): good rows around one bad row."""
    import json

    n = rng.randint(1, 5)
    bad = rng.randrange(n)
    lines: list[object] = []
    named = ""
    for i in range(n):
        if kind in ("spec_bench", "speed-bench"):
            good: dict[str, object] = {"category": rng.choice(["a", "b"]), "turns": ["q " * rng.randint(1, 4)]}
            if i == bad:
                where = rng.choice(["first", "turns"]) if kind == "speed-bench" else "first"
                good["turns"] = [_wrong(rng)] if where == "first" else _wrong(rng, not_text=False)
                named = "turns[0]" if where == "first" else "'turns'"
        else:  # openai
            good = {"messages": [{"role": "user", "content": "hi " * rng.randint(1, 4)}], "max_tokens": 4}
            if i == bad:
                field = rng.choice(["messages", "max_tokens"])
                good[field] = _wrong(rng, not_text=False) if field == "messages" else rng.choice(
                    [None, "8", True, -rng.randint(1, 9), 0, 2.5, [4]])
                named = f"'{field}'"
        lines.append(good)
    text = "".join(json.dumps(x) + "\n" for x in lines)
    return text, "jsonl", named, bad + 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["spec_bench", "speed-bench", "openai"])
def test_generated_data_set_rows_of_the_wrong_type_name_the_file_and_line(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import json

    from lmmbench.testing import build_word_tokenizer

    tok = build_word_tokenizer(tmp_path / "tok", [])
    (tok / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    rng = random.Random(f"{SEED}-{kind}")
    for draw in range(6):
        text, suffix, named, line = _data_set_rows(rng, kind)
        data = tmp_path / f"{draw}.{suffix}"
        data.write_text(text)
        argv = (["bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m", "--result-dir",
                 str(tmp_path / "r"), "--dataset-name", kind] if kind == "spec_bench" else
                ["bench", "sglang", "--port", "9", "--backend", "sglang-oai-chat", "--output-file",
                 str(tmp_path / "o.jsonl"), "--dataset-name", kind])  # fmt: skip
        rows = str(text.count("\n"))  # openai reads the first --num-prompts rows only
        code = main([*argv, "--tokenizer", str(tok), "--dataset-path", str(data), "--num-prompts", rows])
        out = capsys.readouterr()
        errors = [x for x in out.err.splitlines() if x.startswith("error:")]
        assert code == 2 and len(errors) == 1 and "Traceback" not in out.err, (text, out.err[-2000:])
        assert f"{data}:{line}" in errors[0] and named in errors[0], (text, errors[0])


@pytest.mark.timeout(120)
def test_generated_near_misses_of_built_in_tokenizer_names_list_the_built_in_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """``bench serve`` / ``bench sglang`` take a built-in model's name as ``--tokenizer`` (as ``perf``); a name
    that misses it (a dropped, doubled or swapped letter, another case) is one line that lists the names."""
    from lmmbench.models.tiny import TINY_MODEL_NAMES

    rng = random.Random(SEED)
    for draw in range(6):
        name = rng.choice(list(TINY_MODEL_NAMES))
        i = rng.randrange(len(name) - 1)
        miss = rng.choice([name[:i] + name[i + 1 :], name[:i] + name[i] + name[i:], name.upper(),
                           name[:i] + name[i + 1] + name[i] + name[i + 2 :], name + "-x"])  # fmt: skip
        if miss in TINY_MODEL_NAMES:
            continue
        serve = ["bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m", "--random-input-len", "6",
                 "--random-output-len", "3", "--num-prompts", "2", "--result-dir", str(tmp_path / str(draw))]
        sglang = ["bench", "sglang", "--port", "9", "--dataset-name", "random", "--random-input-len", "6",
                  "--random-output-len", "3", "--num-prompts", "2", "--output-file", str(tmp_path / f"{draw}.jsonl")]
        for argv in (serve, sglang):
            code = main([*argv, "--tokenizer", miss])
            out = capsys.readouterr()
            errors = [x for x in out.err.splitlines() if x.startswith("error:")]
            assert code == 2 and len(errors) == 1 and "Traceback" not in out.err, out.err[-2000:]
            assert miss in errors[0] and all(n in errors[0] for n in TINY_MODEL_NAMES), errors[0]
