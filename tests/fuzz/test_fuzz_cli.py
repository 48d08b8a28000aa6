"""Every command that reads a file, fed the generated corpus in-process: exit 2 with one line, no
traceback, nothing written outside the out-dir, nothing already measured lost.

Each row: an id, the argv (``{c:<file>}`` is a corpus file, ``{out}`` the out-dir, ``{url}`` the test
server, ``{free}`` a port nobody listens on) and a text the one error line must contain.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.core.net import free_loopback_port

PERF = ["perf", "--url", "{url}", "--num-requests", "2", "--output-tokens", "2", "--no-plots", "--no-progress"]
EVAL_EP = ["eval", "--model", "tiny-llm", "--mode", "all", "--out-dir", "{out}"]

CASES: list[tuple[str, list[str], str]] = [
    # non-UTF-8 text, every reader
    ("perf-config-not-utf8", [*PERF, "--config", "{c:not_utf8.yaml}", "--out-dir", "{out}"], "not UTF-8"),
    ("perf-workload-not-utf8", [*PERF, "--workload", "{c:not_utf8.yaml}", "--out-dir", "{out}"], "not UTF-8"),
    ("perf-jsonl-not-utf8", [*PERF, "--dataset", "jsonl", "--dataset-path", "{c:not_utf8.jsonl}",
                             "--out-dir", "{out}"], "not UTF-8"),
    ("perf-sharegpt-not-utf8", [*PERF, "--dataset", "sharegpt", "--dataset-path", "{c:not_utf8.json}",
                                "--out-dir", "{out}"], "not UTF-8"),
    ("perf-manifest-not-utf8", [*PERF, "--dataset", "multimodal", "--dataset-path", "{c:manifest_not_utf8.csv}",
                                "--out-dir", "{out}"], "not UTF-8"),
    ("eval-task-not-utf8", [*EVAL_EP, "--tasks", "{c:not_utf8_task.yaml}"], "not UTF-8"),
    ("run-config-not-utf8", ["run", "ttft-breakdown", "--config", "{c:not_utf8.yaml}", "--out-dir", "{out}"],
     "not UTF-8"),
    # malformed structure
    ("perf-config-bad-yaml", [*PERF, "--config", "{c:bad_syntax.yaml}", "--out-dir", "{out}"], "not valid YAML"),
    ("perf-config-not-mapping", [*PERF, "--config", "{c:not_mapping.yaml}", "--out-dir", "{out}"], "mapping"),
    ("perf-config-deep-yaml", [*PERF, "--config", "{c:deep.yaml}", "--out-dir", "{out}"], "deep.yaml"),
    ("perf-sharegpt-deep-json", [*PERF, "--dataset", "sharegpt", "--dataset-path", "{c:deep.json}",
                                 "--out-dir", "{out}"], "nested too deeply"),
    ("perf-jsonl-deep-json", [*PERF, "--dataset", "jsonl", "--dataset-path", "{c:deep.jsonl}",
                              "--out-dir", "{out}"], "nested too deeply"),
    ("perf-missing-file", [*PERF, "--workload", "{out}/nope.yaml", "--out-dir", "{out}"], "not found"),
    ("perf-workload-is-folder", [*PERF, "--workload", "{corpus}", "--out-dir", "{out}"], "folder"),
    # alias bombs and unbounded counts (bounded before any allocation)
    ("perf-config-alias-bomb", [*PERF, "--config", "{c:alias_bomb.yaml}", "--out-dir", "{out}"], "expands to"),
    ("perf-workload-alias-bomb", [*PERF, "--workload", "{c:alias_bomb.yaml}", "--out-dir", "{out}"], "expands to"),
    ("eval-task-alias-bomb", [*EVAL_EP, "--tasks", "{c:task_alias_bomb.yaml}"], "expands to"),
    ("perf-concurrency-1e9", [*PERF, "--concurrency", "1000000000", "--out-dir", "{out}"], "limit concurrency"),
    ("perf-input-tokens-1e12", [*PERF, "--input-tokens", "1000000000000", "--out-dir", "{out}"],
     "limit input_tokens"),
    ("perf-requests-1e12", [*PERF, "--num-requests", "1000000000000", "--out-dir", "{out}"], "limit requests"),
    ("perf-workload-concurrency-1e9", [*PERF, "--workload", "{c:huge_concurrency.yaml}", "--out-dir", "{out}"],
     "limit concurrency"),
    ("perf-bytemlperf-batch-1e9", [*PERF, "--workload", "{c:huge_batches.json}", "--out-dir", "{out}"],
     "limit batch_size"),
    ("perf-sweep-10001-rates", [*PERF, "--rates", ",".join(str(i + 1) for i in range(10_001)), "--out-dir", "{out}"],
     "limit sweep_points"),
    ("perf-workload-points-over-limit", ["--limit", "sweep_points=50", *PERF, "--workload", "{c:many_points.yaml}",
                                         "--out-dir", "{out}"], "limit sweep_points"),
    ("perf-rate-inf-duration-only", [*PERF[:3], "--rate", "inf", "--duration-s", "5", "--out-dir", "{out}"],
     "num-requests"),
    ("media-synth-1e9-seconds", ["media", "synth", "--video-seconds", "1000000000", "--out-dir", "{out}/m"],
     "limit media_seconds"),
    ("eval-batch-1e9", [*EVAL_EP, "--tasks", "sample_mc", "--batch-size", "1000000000"], "limit batch_size"),
    # out-dir that is a file / cannot be created
    ("perf-out-dir-is-file", [*PERF, "--out-dir", "{c:a_file}"], "is a file"),
    ("perf-out-dir-under-file", [*PERF, "--out-dir", "{c:a_file}/sub"], "is a file"),
    ("run-out-dir-is-file", ["run", "ttft-breakdown", "--out-dir", "{c:a_file}"], "is a file"),
    ("media-out-dir-is-file", ["media", "synth", "--out-dir", "{c:a_file}"], "is a file"),
    ("eval-out-dir-is-file", [*EVAL_EP[:-1], "{c:a_file}", "--tasks", "sample_mc", "--limit", "1"], "is a file"),
    ("episodic-video-out-path-is-file", ["run", "episodic-eval", "--env", "toy-waypoints", "--num-tasks", "1",
                                         "--num-trials-per-task", "1", "--max-steps", "2", "--no-progress",
                                         "--out-dir", "{out}", "--video-out-path", "{c:a_file}"], "is a file"),
    ("serve-policy-metrics-out-is-folder", ["serve-policy", "--policy", "toy", "--port", "0",
                                            "--metrics-out", "{corpus}"], "is a folder"),
    # Jinja runtime errors and a template that would build a gigabyte
    ("eval-template-type-error", [*EVAL_EP, "--tasks", "{c:task_type_error.yaml}"], "template"),
    ("eval-template-overflow", [*EVAL_EP, "--tasks", "{c:task_overflow.yaml}"], "template"),
    ("eval-template-1gb-string", [*EVAL_EP, "--tasks", "{c:task_huge_string.yaml}"], "limit prompt_chars"),
    ("eval-template-1e10-loop", ["--limit", "prompt_chars=1000000", *EVAL_EP, "--tasks", "{c:task_huge_loop.yaml}"],
     "limit prompt_chars"),
    # readiness / identity
    ("perf-wrong-model", [*PERF, "--model", "not-this-one", "--out-dir", "{out}"], "is not served"),
    ("perf-nobody-listens", [*PERF[:1], "--url", "http://127.0.0.1:{free}", "--wait-for-server", "0.3",
                             "--out-dir", "{out}"], "cannot reach"),
    ("eval-wrong-model-name", ["eval", "--model", "no-such-model-xyz", "--tasks", "sample_mc", "--out-dir", "{out}"],
     "no-such-model-xyz"),
    ("eval-resume-nothing", ["eval", "--mode", "eval", "--resume", "latest", "--tasks", "sample_mc",
                             "--out-dir", "{out}"], "no earlier run"),
    # corrupt results files under --resume (the folder is prepared by SETUP below)
    ("eval-resume-predictions-not-utf8", ["eval", "--mode", "eval", "--resume", "latest", "--tasks", "sample_mc",
                                          "--out-dir", "{out}"], "not UTF-8"),
    ("run-resume-results-not-utf8", ["run", "ttft-breakdown", "--model", "tiny-llm", "--resume", "--repeats", "1",
                                     "--warmup", "0", "--no-progress", "--out-dir", "{out}"], "not UTF-8"),
    ("run-folder-holds-a-run", ["run", "ttft-breakdown", "--model", "tiny-llm", "--out-dir", "{out}"],
     "already holds a run"),
    # bad --limit
    ("limit-unknown-name", ["--limit", "bogus=3", "perf"], "--limit"),
    # files that name themselves: non-UTF-8 plans, traces, run logs and reference files; bad values in a workload
    ("batch-plan-not-utf8", ["batch", "{c:plan_not_utf8.csv}", "--dry-run"], "plan_not_utf8.csv:2: not UTF-8"),
    ("batch-plan-missing", ["batch", "{out}/nope.csv", "--dry-run"], "nope.csv"),
    ("batch-constraints-missing", ["batch", "{c:plan_ok.csv}", "--constraints", "{out}/nope.txt", "--dry-run"],
     "nope.txt"),
    ("perf-trace-csv-not-utf8", [*PERF, "--dataset", "trace", "--dataset-path", "{c:trace_not_utf8.csv}",
                                 "--out-dir", "{out}"], "trace_not_utf8.csv:2: not UTF-8"),
    ("perf-trace-jsonl-not-utf8", [*PERF, "--dataset", "trace", "--dataset-path", "{c:trace_not_utf8.jsonl}",
                                   "--out-dir", "{out}"], "trace_not_utf8.jsonl:1: not UTF-8"),
    ("perf-workload-negative-length", [*PERF, "--workload", "{c:workload_negative.yaml}", "--out-dir", "{out}"],
     "load point 1 of"),
    ("perf-workload-nan-rate", [*PERF, "--workload", "{c:workload_nan_rate.yaml}", "--out-dir", "{out}"],
     "load point 1 of"),
    ("perf-result-dir-under-file", [*PERF, "--save-result", "--result-dir", "{c:a_file}/res", "--out-dir", "{out}"],
     "--result-dir"),
    ("perf-tokenizer-not-a-tokenizer", [*PERF, "--tokenizer", "{c:a_file}", "--out-dir", "{out}"], "--tokenizer"),
    ("perf-recover-not-a-run", ["perf", "recover", "{c:a_file}"], "a_file"),
    ("runs-show-run-json-not-utf8", ["runs", "show", "{c:run_not_utf8/run.json}"], "run.json: not UTF-8"),
    ("runs-show-run-json-truncated", ["runs", "show", "{c:run_not_json/run.json}"], "cannot read the run log"),
    ("runs-store-not-a-url", ["runs", "list", "--store", "just words"], "run store just words"),
    ("eval-include-path-is-file", [*EVAL_EP, "--tasks", "sample_mc", "--include-path", "{c:a_file}"], "a_file"),
    ("eval-include-chain-too-deep", [*EVAL_EP, "--tasks", "{c:include_0.yaml}"], "limit include_depth"),
    ("episodic-reference-not-utf8", ["run", "episodic-eval", "--reference", "{c:reference_not_utf8.jsonl}",
                                     "--out-dir", "{out}"], "reference_not_utf8.jsonl:1: not UTF-8"),
    ("episodic-reference-bad-line", ["run", "episodic-eval", "--reference", "{c:reference_bad_line.jsonl}",
                                     "--out-dir", "{out}"], "reference_bad_line.jsonl line 2"),
    ("episodic-policy-no-such-module", ["run", "episodic-eval", "--policy", "no_such_mod_xyz:Policy",
                                        "--out-dir", "{out}"], "--policy no_such_mod_xyz:Policy"),
    ("episodic-env-file-missing", ["run", "episodic-eval", "--env", "{out}/nope.py:Env", "--out-dir", "{out}"],
     "nope.py"),
    ("run-manifest-not-utf8", ["run", "ttft-breakdown", "--model", "tiny-llm", "--manifest",
                               "{c:manifest_not_utf8.csv}", "--out-dir", "{out}"], "manifest_not_utf8.csv"),
    ("run-profile-repeat-past-repeats", ["run", "ttft-breakdown", "--model", "tiny-llm", "--profile", "--repeats", "1",
                                         "--profile-repeat", "99", "--warmup", "0", "--no-progress",
                                         "--out-dir", "{out}"], "--profile-repeat 99"),
    ("models-build-out-of-a-tiny-model", ["models", "build", "tiny-llm", "--out", "{out}/m"], "shape:NAME only"),
    ("reference-dump-out-is-file", ["reference", "dump", "--model", "tiny-llm", "--out", "{c:a_file}/ref"],
     "a_file"),
    ("home-is-a-file", ["runs", "list"], "LMMBENCH_HOME"),
    ("perf-result-filename-under-file", [*PERF, "--save-result", "--result-filename", "{c:a_file}/r.json",
                                         "--out-dir", "{out}"], "--result-filename"),
    ("perf-multiturn-set-not-utf8", [*PERF, "--dataset", "multiturn", "--dataset-path", "{c:not_utf8.json}",
                                     "--out-dir", "{out}"], "not_utf8.json:1: not UTF-8"),
    ("perf-extra-body-not-json", [*PERF, "--extra-body", "{bad", "--out-dir", "{out}"], "{bad"),
    ("perf-baseline-unknown", [*PERF, "--baseline", "no-run-of-this-name", "--out-dir", "{out}"],
     "no run 'no-run-of-this-name'"),
    ("reference-dump-prompts-not-utf8", ["reference", "dump", "--model", "tiny-llm", "--prompts",
                                         "{c:prompts_not_utf8.txt}", "--out", "{out}/ref"], "prompts_not_utf8.txt"),
]


#: Files a case needs in its out-dir before it runs (relative path -> bytes).
SETUP: dict[str, dict[str, bytes]] = {
    "eval-resume-predictions-not-utf8": {"20260101_000000/predictions/sample_mc.jsonl": b'{"key": "caf\xe9"}\n'},
    "run-resume-results-not-utf8": {"ttft-breakdown/ttft-breakdown_results.csv": b"sample_id,repeat\n\xff\xfe,0\n"},
    "run-folder-holds-a-run": {"ttft-breakdown/ttft-breakdown_results.csv": b"sample_id,repeat,status\nx,0,ok\n"},
}


def _expand(argv: list[str], corpus: dict[str, Path], out: Path, url: str) -> list[str]:
    free = str(free_loopback_port())
    result = []
    for a in argv:
        for name, path in corpus.items():
            a = a.replace(f"{{c:{name}}}", str(path))
        a = a.replace("{corpus}", str(corpus["a_file"].parent)) if corpus else a
        result.append(a.replace("{out}", str(out)).replace("{url}", url).replace("{free}", free))
    return result


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("case", "argv", "expect"), CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_one_line_and_exit_2(
    case: str, argv: list[str], expect: str, corpus: dict[str, Path], fuzz_url: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # anything written to the working directory would show up here
    if case == "home-is-a-file":
        monkeypatch.setenv("LMMBENCH_HOME", str(corpus["a_file"]))
        monkeypatch.delenv("LMMBENCH_STORE_URL", raising=False)
    for lim in ("SWEEP_POINTS", "PROMPT_CHARS"):  # --limit sets these for the process: undo after the case
        monkeypatch.delenv(f"LMMBENCH_LIMIT_{lim}", raising=False)
    out = tmp_path / "out"
    for rel, content in SETUP.get(case, {}).items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(content)
    out_before = _tree(out) if out.exists() else {}
    corpus_before = _tree(corpus["a_file"].parent)
    rc = main(_expand(argv, corpus, out, fuzz_url))
    err = capsys.readouterr().err
    assert rc == 2, f"{case}: exit {rc}\n{err[-2000:]}"
    assert "Traceback" not in err
    error_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and expect in error_lines[0], err[-2000:]
    assert len(error_lines[0]) < 600, "one readable line, not a dump"
    assert not any(work.iterdir()), f"{case} wrote into the working directory: {list(work.iterdir())}"
    assert _tree(corpus["a_file"].parent) == corpus_before, f"{case} changed an input file"
    if out_before:  # what was there (measured) is untouched
        assert {k: v for k, v in _tree(out).items() if k in out_before} == out_before
    elif out.exists():  # a refused run leaves no folder that looks like a run
        assert not list(out.rglob("run.json")) and not list(out.rglob("*.jsonl")), list(out.rglob("*"))


def test_long_csv_fields_are_read(corpus: dict[str, Path]) -> None:
    """A 300 KB prompt in a manifest is above the csv module's default field limit (128 KiB)."""
    from lmmbench.media.manifest import load_manifest

    rows = load_manifest(corpus["long_field.csv"])
    assert len(rows) == 1 and len(rows[0].prompt) == 300_000


def test_rate_inf_sends_every_request_at_once_bounded_by_concurrency(fuzz_url: str, tmp_path: Path) -> None:
    import json

    assert main([*_expand(PERF, {}, tmp_path, fuzz_url), "--num-requests", "12", "--rate", "inf",
                 "--concurrency", "4", "--out-dir", str(tmp_path), "--run-name", "inf"]) == 0  # fmt: skip
    records = [json.loads(x) for x in (tmp_path / "perf" / "inf" / "records.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(r["status"] == 200 for r in records)
    scheduled = {r["scheduled_ns"] for r in records}
    assert len(scheduled) == 1, "every request is scheduled at t0"
    sends = sorted(r["sent_ns"] for r in records)
    ends = sorted(r["end_ns"] for r in records)
    assert sends[4] >= ends[0], "the fifth request waits for a slot: at most 4 in flight"


def test_unexpected_exception_is_one_line_with_a_saved_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (here: a spec whose setup raises ZeroDivisionError, mocked) is exit 1 and a file, not a dump."""
    import lmmbench.sessions.spec_session as session

    def broken(*_: object) -> None:
        raise ZeroDivisionError("mocked bug")

    monkeypatch.setattr(session, "run_spec", broken)
    monkeypatch.setenv("LMMBENCH_HOME", str(tmp_path / "home"))
    rc = main(["run", "ttft-breakdown", "--out-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    saved = Path(err.strip().rsplit("traceback saved to ", 1)[1])
    assert saved.is_file() and "ZeroDivisionError: mocked bug" in saved.read_text()
    assert str(tmp_path / "home") in str(saved) and os.path.commonpath([saved, tmp_path]) == str(tmp_path)


def test_a_failed_eval_leaves_nothing_resume_latest_would_pick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused endpoint fails before any run folder; --resume latest then finds nothing to resume."""
    dead = f"http://127.0.0.1:{free_loopback_port()}"
    out = tmp_path / "eval"
    assert main(["eval", "--model", dead, "--tokenizer", "tiny-llm", "--tasks", "sample_mc", "--wait-for-server",
                 "0.3", "--out-dir", str(out)]) == 2  # fmt: skip
    assert "cannot reach" in capsys.readouterr().err
    assert not [p for p in out.rglob("*") if p.is_file()]
    assert main(["eval", "--mode", "eval", "--resume", "latest", "--tasks", "sample_mc", "--out-dir", str(out)]) == 2
    assert "no earlier run" in capsys.readouterr().err
