"""Trace replay, long schedules and episodic counts that used to hang or eat memory: each is one line and
exit 2 within 5 seconds, naming the file and row (or the option) and the bound (docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from pacer import MODEL_LIBS, returns_before_pacer


def _mooncake(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


OK = {"timestamp": 0, "input_length": 8, "output_length": 2}
TRACES: dict[str, tuple[str, str, str]] = {  # id -> (file name, content, words the error line must hold)
    "input-length-1e12": ("t.jsonl", _mooncake([OK, {**OK, "input_length": 10**12}]), "trace row 2: input length"),
    "arrival-1e15-ms": ("t.jsonl", _mooncake([OK, {**OK, "timestamp": 10**15}]), "limit duration_s"),
    "timestamp-nan": ("t.jsonl", '{"timestamp": 0, "input_length": 8, "output_length": 2}\n'
                      '{"timestamp": NaN, "input_length": 8, "output_length": 2}\n', "trace row 2"),
    "timestamp-1e400": ("t.jsonl", '{"timestamp": 1e400, "input_length": 8, "output_length": 2}\n', "trace row 1"),
    "timestamps-out-of-order": ("t.jsonl", _mooncake([{**OK, "timestamp": 500}, OK]), "goes back in time"),
    "negative-length": ("t.jsonl", _mooncake([{**OK, "output_length": -3}]), "must not be negative"),
    "hash-ids-200k": ("t.jsonl", _mooncake([{**OK, "hash_ids": list(range(200_000))}]), "limit hash_ids"),
    "azure-year-9999": ("t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,8,2\n"
                        "9999-01-01 00:00:00.0000000,8,2\n", "limit duration_s"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(TRACES))
def test_bad_traces_are_one_line_exit_2_fast(
    case: str, fuzz_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, content, words = TRACES[case]
    trace = tmp_path / name
    trace.write_text(content, encoding="utf-8")
    argv = ["perf", "--url", fuzz_url, "--dataset", "trace", "--dataset-path", str(trace), "--num-requests", "2",
            "--no-plots", "--no-progress", "--out-dir", str(tmp_path / "out")]  # fmt: skip
    # refused before a pacer of 15 fresh CLI imports finishes (perf imports no model, but the first call in a
    # process imports its modules; reading a trace to its end, or waiting for its year 9999, would lose the race)
    code, quickly = returns_before_pacer(lambda: main(argv), imports=15)
    text = capsys.readouterr().err
    err = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2 and quickly, (code, text)
    assert len(err) == 1 and words in err[0] and str(trace) in err[0] and "Traceback" not in text, text


SCHEDULES: dict[str, tuple[list[str], str]] = {  # id -> (argv, words the error line must hold)
    "duration-1e12-s": (["perf", "--url", "{url}", "--duration-s", "1000000000000"], "limit duration_s"),
    "workload-perf-time-1e9": (["perf", "--url", "{url}", "--workload", "{tmp}/w.json"], "limit duration_s"),
    "episodes-1e9": (["run", "episodic-eval", "--num-tasks", "1000000000"], "limit episodes"),
    "run-name-with-directory-parts": (["perf", "--url", "{url}", "--run-name", "../../escape"], "run_name"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(SCHEDULES))
def test_unbounded_schedules_episode_counts_and_path_names_are_refused_fast(
    case: str, fuzz_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, words = SCHEDULES[case]
    (tmp_path / "w.json").write_text(json.dumps({"tp_sizes": [1], "batch_sizes": [1], "input_tokens": [8],
                                                 "perf_time": 1e9}))  # fmt: skip
    args = [a.replace("{url}", fuzz_url).replace("{tmp}", str(tmp_path)) for a in argv]
    # refused before a pacer of 3 fresh imports of transformers finishes (checking the schedule costs less than
    # the first import of its command's modules, torch among them for episodic runs; building an unbounded one
    # would lose)
    code, quickly = returns_before_pacer(lambda: main([*args, "--out-dir", str(tmp_path / "out")]), imports=3,
                                         module=MODEL_LIBS)  # fmt: skip
    assert code == 2 and quickly
    text = capsys.readouterr().err
    err = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and words in err[0] and "Traceback" not in text, text


def test_bad_limit_values_and_dates_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A non-number in LMMBENCH_LIMIT_* (read when lmmbench starts: it used to print a raw traceback for every
    command), an infinite --limit, and a --since that is not a date (it matched nothing, silently)."""
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 's.sqlite'}")
    monkeypatch.setenv("LMMBENCH_LIMIT_CSV_FIELD_BYTES", "abc")
    assert main(["runs", "list"]) == 2
    assert "LMMBENCH_LIMIT_CSV_FIELD_BYTES='abc'" in capsys.readouterr().err
    monkeypatch.delenv("LMMBENCH_LIMIT_CSV_FIELD_BYTES")
    monkeypatch.setenv("LMMBENCH_LIMIT_CONCURRENCY", "1")  # monkeypatch restores what --limit overwrites
    assert main(["--limit", "concurrency=1e400", "runs", "list"]) == 2
    assert "finite" in capsys.readouterr().err
    monkeypatch.delenv("LMMBENCH_LIMIT_CONCURRENCY")
    assert main(["runs", "list", "--since", "notadate"]) == 2
    assert "not a date" in capsys.readouterr().err


def test_a_byte_order_mark_is_not_part_of_the_first_column(
    fuzz_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spreadsheets save CSV with a UTF-8 BOM: a plan and an Azure trace still read their columns."""
    plan = tmp_path / "p.csv"
    plan.write_bytes(b"\xef\xbb\xbfname,kind,model,options,executor,requirements,image\n"
                     b'a,eval,tiny-llm,tasks=["sample_mc"];limit=1,,,\n')  # fmt: skip
    assert main(["batch", str(plan), "--dry-run"]) == 0
    trace = tmp_path / "t.csv"
    trace.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,8,2\n"
                      b"2023-11-16 18:15:46.7805900,8,2\n")  # fmt: skip
    assert main(["perf", "--url", fuzz_url, "--dataset", "trace", "--dataset-path", str(trace), "--num-requests",
                 "2", "--no-plots", "--no-progress", "--out-dir", str(tmp_path / "o")]) == 0  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("words", "expect"), [(40_000, "more than the model's context of 32768"),
                                               (1_200_000, "cannot fit the model's context")])  # fmt: skip
def test_a_prompt_longer_than_the_context_is_refused_before_measuring(
    words: int, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` checks prompts against the model's context as eval and serve do: a 40k-token prompt on a 32k-context
    model used to be measured and reported ok; a 5 MB prompt used to hang at 10 GB."""
    from lmmbench.media.manifest import write_manifest

    manifest = write_manifest(tmp_path / "m.csv", [{"id": "long", "prompt": " ".join(["word"] * words)}])
    argv = ["run", "ttft-breakdown", "--model", "tiny-llm", "--manifest", str(manifest), "--repeats", "1",
            "--warmup", "0", "--no-progress", "--out-dir", str(tmp_path / "o")]  # fmt: skip
    # refused before a pacer of 4 fresh imports of transformers finishes: the call imports them once (when first
    # in its process), loads the model and tokenizes the prompt; measuring it (or the 10 GB hang) would lose
    code, quickly = returns_before_pacer(lambda: main(argv), imports=4, module=MODEL_LIBS)
    assert code == 2 and quickly
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "row long" in err[0] and expect in err[0]
    assert not (tmp_path / "o" / "ttft-breakdown" / "ttft-breakdown_results.csv").exists()
