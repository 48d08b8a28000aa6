"""Every input kind of the CLI has a fuzz case. The kinds are listed from the program itself, not by hand: every
option or argument of every command whose type is a path or whose help names a file, folder, path, URL or
``module:Class``, and every ``LMMBENCH_*`` environment variable the source reads. A new option or variable with no
entry in ``INPUT_KINDS`` fails this test; an entry naming a case that does not exist fails it too.

An entry names fuzz cases by their ids (``test_fuzz_cli.CASES``, ``test_fuzz_traces.TRACES`` /
``SCHEDULES``, ``test_fuzz_store.STORES``, ``test_fuzz_bounds.CASES``, ``test_fuzz_every_bound.CASES``), or a test
elsewhere as ``tests/<path>::<function>`` (checked to exist), or says ``not a path: ...`` with the reason."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_fuzz_bounds
import test_fuzz_cli
import test_fuzz_dropins
import test_fuzz_every_bound
import test_fuzz_store
import test_fuzz_traces
import typer

import lmmbench
from lmmbench.cli.main import build_app
from lmmbench.config.limits import LIMITS

TESTS = Path(__file__).resolve().parents[1]
HELP_NAMES_A_PATH = re.compile(r"\b(file|folder|path|directory|URL|URI|module:Class|YAML|JSONL?|CSV)\b",
                               re.IGNORECASE)  # fmt: skip

INPUT_KINDS: dict[str, list[str]] = {
    # path options and arguments
    "--config": ["perf-config-not-utf8", "perf-config-bad-yaml", "perf-config-deep-yaml", "run-config-not-utf8"],
    "--constraints": ["batch-constraints-missing"],
    "--dataset-path": ["perf-jsonl-not-utf8", "perf-sharegpt-deep-json", "perf-manifest-not-utf8",
                       "perf-trace-csv-not-utf8", "perf-multiturn-set-not-utf8", "timestamp-nan"],
    "--manifest": ["run-manifest-not-utf8"],
    "--out": ["reference-dump-out-is-file", "models-build-out-of-a-tiny-model"],
    "--video-out-path": ["episodic-video-out-path-is-file"],
    "--metrics-out": ["serve-policy-metrics-out-is-folder"],
    "--out-dir": ["perf-out-dir-is-file", "perf-out-dir-under-file", "run-out-dir-is-file", "eval-out-dir-is-file"],
    "--reference": ["episodic-reference-not-utf8", "episodic-reference-bad-line"],
    "--result-dir": ["perf-result-dir-under-file"],
    "--result-filename": ["perf-result-filename-under-file"],
    "--tokenizer": ["perf-tokenizer-not-a-tokenizer"],
    "--workload": ["perf-workload-not-utf8", "perf-workload-alias-bomb", "perf-workload-negative-length"],
    "plan": ["batch-plan-not-utf8", "batch-plan-missing"],
    "recover_dir": ["perf-recover-not-a-run"],
    # string options that name a file, a class, a server or a store
    "--env": ["episodic-env-file-missing"],
    "--policy": ["episodic-policy-no-such-module"],
    "--include-path": ["eval-include-path-is-file"],
    "--include_path": ["eval-include-path-is-file"],
    "--tasks": ["eval-task-not-utf8", "eval-include-chain-too-deep", "eval-template-1gb-string"],
    "--prompts": ["reference-dump-prompts-not-utf8"],
    "--store": ["runs-store-not-a-url", "not-a-database", "foreign-runs-table", "missing-driver"],
    "--url": ["perf-nobody-listens", "perf-wrong-model"],
    "--base-url": ["perf-nobody-listens"],
    "--model": ["eval-wrong-model-name", "perf-wrong-model"],
    "--baseline": ["perf-baseline-unknown"],
    "--resume": ["eval-resume-nothing", "eval-resume-predictions-not-utf8", "run-resume-results-not-utf8"],
    "--run-name": ["run-name-with-directory-parts"],
    "run": ["runs-show-run-json-not-utf8", "runs-show-run-json-truncated"],
    "--mlflow": ["tests/runs/test_run_sinks.py::test_a_failing_sink_is_a_warning"],
    "--label": ["not a path: vLLM's file-name prefix of its result file, honoured as vLLM does"],
    "--host": ["not a path: vLLM's server host, joined with --port into --url (perf-nobody-listens)"],
    "--turns": ["not a path: a count of turns (1 to 1000, pydantic bounds)"],
    "--extra-body": ["perf-extra-body-not-json"],
    "--profile": ["run-profile-repeat-past-repeats"],
    "--save-result": ["perf-result-dir-under-file"],
    "--dataset": ["not a path: a dataset kind (a registry name); its file is --dataset-path"],
    "--hf-name": ["tests/perf/test_vllm_hub_datasets.py::test_every_vllm_hf_data_set_is_accepted_or_refused_by_name"],
    "--backend": ["not a path: vLLM's backend name, a choice that picks the API (tests/perf/test_vllm_compat.py)"],
    "--trace-format": ["not a path: auto | mooncake | azure; the trace file is --dataset-path (TRACES)"],
    "--result-format": ["not a path: the format of the result file written under --result-dir"],
    "--attn-implementation": ["not a path: an attention implementation name, validated by the model's loader"],
    "--json-output": ["not a path: a switch printing the run as JSON"],
    "--json": ["not a path: envs list's switch printing the venvs as JSON (alias of --json-output)"],
    "action": ["not a path: perf's action (run, search, recover), a choice"],
    "--models": ["not a path: NAME=URL pairs or model names, each checked as --url / --model are"],
    "--answers": ["tests/perf/test_perf_tasks.py::test_score_reports_the_accuracy_drop_under_load_and_mcnemar_"
                  "flags_it"],
    "--tp-label-only": ["not a path: a switch (its help names --url); tests/perf/test_bytemlperf_workload.py"],
    "--workloads-dir": ["tests/perf/test_bytemlperf_launcher.py::test_a_bare_name_is_found_as_the_launcher_finds_its_"
                        "task"],
    "--server-per-tp": ["not a path: a switch (its help names ByteMLPerf's workloads); "
                        "tests/perf/test_bytemlperf_launcher.py"],
    "--hardware-type": ["not a path: report.json's Backend label, as ByteMLPerf's --hardware_type"],
    "--api-key": ["not a path: the bearer token of --url, masked in every file (tests/reliability/test_lifecycle.py)"],
    "--backend-name": ["not a path: a label for report.json's Backend field (its help names the URL)"],
    "--logprobs-reference": ["tests/eval/test_reference_backends.py::test_url_logprob_diff_reports_the_server_s_"
                             "injected_shift_and_divergence"],
    "--upstream": ["tests/serve/test_proxy.py::test_a_bad_upstream_is_one_line_and_exit_2"],
    # environment variables
    "LMMBENCH_HOME": ["home-is-a-file"],
    "LMMBENCH_PROMPT_PATH": ["tests/fuzz/test_fuzz_env_files.py::test_a_prompt_folder_from_the_environment_with_a_"
                             "non_utf8_template"],
    "LMMBENCH_WHISPER_SPELLING": ["tests/fuzz/test_fuzz_env_files.py::test_a_spelling_table_from_the_environment_"
                                  "that_is_not_one"],
    "LMMBENCH_STORE_URL": ["tests/fuzz/test_fuzz_store.py::test_a_command_that_writes_a_run_keeps_it_and_says_"
                           "indexing_failed"],
    "LMMBENCH_CONSTRAINTS": ["tests/fuzz/test_fuzz_coverage.py::test_a_constraints_variable_naming_no_file"],
    "LMMBENCH_CONTAINER_ENGINE": ["tests/plans/test_container.py::test_missing_engine_binary"],
    "LMMBENCH_WHEEL": ["tests/fuzz/test_fuzz_env_files.py::test_a_wheel_or_container_cache_from_the_environment_"
                       "that_is_not_one"],
    "LMMBENCH_CONTAINER_CACHE": ["tests/fuzz/test_fuzz_env_files.py::test_a_wheel_or_container_cache_from_the_"
                                 "environment_that_is_not_one"],
    "LMMBENCH_MLFLOW_URI": ["tests/runs/test_run_sinks.py::test_a_failing_sink_is_a_warning"],
    "LMMBENCH_WANDB_PROJECT": ["tests/runs/test_run_sinks.py::test_a_failing_sink_is_a_warning"],
    **{lim.env_var: ["tests/fuzz/test_fuzz_traces.py::test_bad_limit_values_and_dates_are_one_line_exit_2",
                     lim.name] for lim in LIMITS.values()},
}


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


def cli_input_kinds() -> dict[str, set[str]]:
    """Option / argument name -> the commands that take it, for every parameter that names a path or URL."""
    kinds: dict[str, set[str]] = {}
    for path, cmd in _commands(typer.main.get_command(build_app())):
        for param in cmd.params:
            annotation = repr(getattr(getattr(param, "type_descriptor", None), "annotation", ""))
            help_text = getattr(param, "help", None) or ""
            if "Path" in annotation or HELP_NAMES_A_PATH.search(help_text):
                names = [o for o in param.opts if o.startswith("--")] or [param.name]
                for name in names:
                    kinds.setdefault(name, set()).add(" ".join(path))
    return kinds


def env_input_kinds() -> set[str]:
    """Every ``LMMBENCH_*`` variable the source reads (``LMMBENCH_LIMIT_`` expands to the table's)."""
    found: set[str] = set()
    for source in Path(lmmbench.__file__).parent.rglob("*.py"):
        found |= set(re.findall(r"LMMBENCH_[A-Z_]*[A-Z]", source.read_text(encoding="utf-8")))
    found = {v for v in found if not v.startswith("LMMBENCH_LIMIT")}
    return found | {lim.env_var for lim in LIMITS.values()}


def fuzz_case_ids() -> set[str]:
    return ({c[0] for c in test_fuzz_cli.CASES} | set(test_fuzz_traces.TRACES) | set(test_fuzz_traces.SCHEDULES)
            | set(test_fuzz_store.STORES) | {c[0] for c in test_fuzz_bounds.CASES}
            | set(test_fuzz_every_bound.CASES))  # fmt: skip


def _exists(ref: str, ids: set[str]) -> bool:
    if ref.startswith("not a path: "):
        return True
    if "::" in ref:
        file, function = ref.split("::")
        path = TESTS.parent / file
        return path.is_file() and f"def {function}(" in path.read_text(encoding="utf-8")
    return ref in ids


def test_every_input_kind_of_the_cli_has_a_fuzz_case() -> None:
    kinds = cli_input_kinds()
    assert {"--config", "--workload", "--dataset-path", "--store", "--tasks", "--reference"} <= set(kinds)  # sanity
    missing = {k: sorted(v) for k, v in kinds.items() if k not in INPUT_KINDS}
    assert not missing, f"options with no fuzz case (add one and an INPUT_KINDS entry): {missing}"


def test_every_environment_variable_has_a_fuzz_case() -> None:
    found = env_input_kinds()
    assert {"LMMBENCH_HOME", "LMMBENCH_STORE_URL"} <= found  # sanity
    missing = sorted(v for v in found if v not in INPUT_KINDS)
    assert not missing, f"environment variables with no fuzz case: {missing}"


def test_every_named_case_exists() -> None:
    ids = fuzz_case_ids()
    dangling = {k: [r for r in refs if not _exists(r, ids)] for k, refs in INPUT_KINDS.items()}
    assert not {k: v for k, v in dangling.items() if v}, dangling


def test_every_flag_of_the_drop_ins_is_fuzzed() -> None:
    """`bench serve` and `bench sglang` take the peers' own flags (not typer options): every flag they carry that
    takes a value is fuzzed by test_fuzz_dropins (numbers and text, listed from the same flag tables); switches
    take none; --port's range is tests/perf/test_dropin_values.py's. Their data-set kinds that read a file are
    fed hostile files there too (test_the_file_kinds_are_every_carried_kind_that_reads_a_file)."""
    from lmmbench.config.dropins import sglang_serving as sgl
    from lmmbench.config.dropins import vllm_serve as vllm

    d = test_fuzz_dropins
    for flags, carried, cases in ((vllm.VLLM_FLAGS, vllm._CARRIED, d.VLLM_CASES + d.VLLM_TEXT_CASES),
                                  (sgl.SGLANG_FLAGS, sgl.CARRIED, d.SGLANG_CASES + d.SGLANG_TEXT_CASES)):
        fuzzed = {dest for _, dest, _ in cases}
        switches = {f["dest"] for f in flags if f["action"] in ("_StoreTrueAction", "BooleanOptionalAction")}
        missing = sorted(set(carried) - fuzzed - switches - {"port"})
        assert not missing, f"drop-in flags with no fuzz case: {missing}"
    assert _exists("tests/perf/test_dropin_values.py::test_vllm_port_outside_the_tcp_range", set())


def test_a_constraints_variable_naming_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LMMBENCH_CONSTRAINTS is read by the venv executor: a path that is no file is one line naming the variable."""
    from lmmbench.core.errors import UserError
    from lmmbench.executors.venvs import default_constraints

    monkeypatch.setenv("LMMBENCH_CONSTRAINTS", str(tmp_path / "nope.txt"))
    with pytest.raises(UserError, match=r"LMMBENCH_CONSTRAINTS=.*nope\.txt: no such file"):
        default_constraints()
