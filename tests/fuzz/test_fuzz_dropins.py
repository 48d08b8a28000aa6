"""The drop-ins' own inputs, fuzzed: every numeric flag `bench serve` (vLLM's) and `bench sglang` (SGLang's) carry,
set to hostile values, and every data-set kind that reads a file, fed hostile files. The flags and kinds are
listed from the drop-ins' flag tables (``VLLM_FLAGS``, ``SGLANG_FLAGS``), not by hand, so a flag added there is
fuzzed here at once.

Each case runs the drop-in's own steps up to the moment the server would be contacted (parse, translate, draw
the requests, build the perf config), as ``run_bench_serve`` / ``run_bench_sglang`` do them: a value is either
accepted or refused with a ``UserError`` naming the flag (or the file); any other exception is the crash the
suite exists to catch. The whole command, server included, is run for the cases of ``tests/perf/
test_dropin_values.py``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from lmmbench.config.dropins import sglang_serving as sgl
from lmmbench.config.dropins import vllm_serve as vllm
from lmmbench.core.errors import UserError
from lmmbench.testing import build_word_tokenizer

#: flags whose value picks a server-side behaviour only or whose hostile values another test owns
_SKIP = {"port"}  # tests/perf/test_dropin_values.py (a port is checked before anything is drawn)
VALUES = {"int": ["-1", "0", "99999999999"], "float": ["-1", "0", "nan", "-inf", "1e30"]}


def _numeric(flags: list[dict[str, Any]], carried: set[str]) -> list[tuple[str, str, str]]:
    out = []
    for f in flags:
        kind = {"int": "int", "float": "float", "_finite_positive_float": "float"}.get(f["type"] or "")
        if kind and f["dest"] in carried and f["dest"] not in _SKIP and f.get("nargs") is None:
            out += [(f["flags"][0], f["dest"], v) for v in VALUES[kind]]
    return out


VLLM_CASES = _numeric(vllm.VLLM_FLAGS, vllm._CARRIED)
SGLANG_CASES = _numeric(sgl.SGLANG_FLAGS, sgl.CARRIED)
#: hostile text for every flag that takes text (names, paths, JSON, lists): empty, a number where a word is due,
#: JSON of the wrong shape, broken JSON, a path under no folder
TEXTS = ["", "-1", "[1,2]", "{", "/nonexistent_i35/dir/file.jsonl"]


def _textual(flags: list[dict[str, Any]], carried: set[str], numeric: list[tuple[str, str, str]]
             ) -> list[tuple[str, str, str]]:  # fmt: skip
    """Every carried flag that takes a value and is not fuzzed as a number."""
    done = {dest for _, dest, _ in numeric} | _SKIP
    out = []
    for f in flags:
        takes_value = f["action"] not in ("_StoreTrueAction", "BooleanOptionalAction")
        if f["dest"] in carried and f["dest"] not in done and takes_value:
            out += [(f["flags"][0], f["dest"], v) for v in TEXTS]
    return out


VLLM_TEXT_CASES = _textual(vllm.VLLM_FLAGS, vllm._CARRIED, VLLM_CASES)
SGLANG_TEXT_CASES = _textual(sgl.SGLANG_FLAGS, sgl.CARRIED, SGLANG_CASES)


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = build_word_tokenizer(tmp_path_factory.mktemp("tok"), [])
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    return folder


def _vllm_prepare(argv: list[str]) -> None:
    """``run_bench_serve`` up to the load: parse, translate, check outputs, draw, validate the perf config."""
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.sessions.dropins.vllm_session import build_bench_requests, check_outputs

    ns = vllm.build_parser().parse_args(argv)
    options = vllm.translate(ns)
    check_outputs(ns)
    requests, tok_path = build_bench_requests(ns)
    options.update(num_requests=len(requests), tokenizer=str(tok_path) if tok_path else None)
    PerfConfig.model_validate({**{k: v for k, v in options.items() if v is not None}, "plots": False})


def _sglang_prepare(argv: list[str]) -> None:
    """``run_bench_sglang`` up to the load (the ShareGPT file of the hub is never asked for)."""
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.sessions.dropins.sglang_run import sglang_requests

    ns = sgl.build_parser().parse_args(argv)
    options = sgl.translate(ns)
    drawn = None
    if sgl.drawn_by_sglang(ns):
        from lmmbench.sessions.dropins.sglang_datasets import draw_sglang_requests

        def no_hub() -> Path:
            raise UserError("the hub's ShareGPT file is not asked for in the fuzz suite")

        cfg, drawn = draw_sglang_requests(ns, options, no_hub)
    else:
        cfg = PerfConfig.model_validate({**options, "plots": False})
    sglang_requests(ns, cfg, drawn)


def _accepted_or_named(prepare: Any, argv: list[str], names: tuple[str, ...]) -> None:
    try:
        prepare(argv)
    except UserError as exc:
        text = str(exc)
        assert "\n" not in text and any(n in text for n in names), f"{argv}: {text}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("flag", "dest", "value"), VLLM_CASES, ids=[f"{f} {v}" for f, _, v in VLLM_CASES])
def test_every_numeric_vllm_flag_is_accepted_or_refused_by_name(tok: Path, tmp_path: Path, flag: str, dest: str,
                                                                value: str) -> None:  # fmt: skip
    base = shlex.split(f"--model m --tokenizer {tok} --random-input-len 6 --random-output-len 3 --num-prompts 2 "
                       f"--result-dir {tmp_path}")  # fmt: skip
    alias = {"input_len": "--random-input-len", "output_len": "--random-output-len"}.get(dest, flag)  # vLLM's
    _accepted_or_named(_vllm_prepare, [*base, f"{flag}={value}"], (flag, f"--{dest.replace('_', '-')}", alias))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("flag", "dest", "value"), SGLANG_CASES, ids=[f"{f} {v}" for f, _, v in SGLANG_CASES])
def test_every_numeric_sglang_flag_is_accepted_or_refused_by_name(tok: Path, tmp_path: Path, flag: str, dest: str,
                                                                  value: str) -> None:  # fmt: skip
    base = shlex.split(f"--port 1 --tokenizer {tok} --dataset-name random --random-input-len 6 --random-output-len 3 "
                       f"--num-prompts 2 --output-file {tmp_path / 'o.jsonl'}")  # fmt: skip
    _accepted_or_named(_sglang_prepare, [*base, f"{flag}={value}"], (flag, f"--{dest.replace('_', '-')}"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("flag", "dest", "value"), VLLM_TEXT_CASES,
                         ids=[f"{f} {v!r}" for f, _, v in VLLM_TEXT_CASES])  # fmt: skip
def test_every_text_vllm_flag_is_accepted_or_refused_by_name(tok: Path, tmp_path: Path, flag: str, dest: str,
                                                             value: str) -> None:  # fmt: skip
    base = shlex.split(f"--model m --tokenizer {tok} --random-input-len 6 --random-output-len 3 --num-prompts 2 "
                       f"--result-dir {tmp_path}")  # fmt: skip
    names = (flag, f"--{dest.replace('_', '-')}", "--dataset-name", "--backend", "--endpoint", "--result")
    _accepted_or_named(_vllm_prepare, [*base, f"{flag}={value}"], names)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("flag", "dest", "value"), SGLANG_TEXT_CASES,
                         ids=[f"{f} {v!r}" for f, _, v in SGLANG_TEXT_CASES])  # fmt: skip
def test_every_text_sglang_flag_is_accepted_or_refused_by_name(tok: Path, tmp_path: Path, flag: str, dest: str,
                                                               value: str) -> None:  # fmt: skip
    base = shlex.split(f"--port 1 --tokenizer {tok} --dataset-name random --random-input-len 6 --random-output-len 3 "
                       f"--num-prompts 2 --output-file {tmp_path / 'o.jsonl'}")  # fmt: skip
    names = (flag, f"--{dest.replace('_', '-')}", "--dataset-name", "--backend")
    _accepted_or_named(_sglang_prepare, [*base, f"{flag}={value}"], names)


#: hostile data files, each fed to every data-set kind that reads --dataset-path
HOSTILE = {
    "not_utf8": b"\xff\xfe\x00garbage\n",
    "empty": b"",
    "one_object": json.dumps({"conversations": [{"from": "human", "value": "hi"}]}).encode(),
    "list_of_strings": json.dumps(["a", "b"]).encode(),
    "conversations_string": json.dumps([{"conversations": "hello there"}]).encode(),
    "rows_of_wrong_types": b'{"prompt": 5, "output_tokens": "x", "timestamp": "soon", "hash_ids": "q"}\n',
    "huge_counts": b'{"prompt": "a b", "output_tokens": 1e11, "timestamp": 0, "input_length": 1e11, '
                   b'"output_length": 1e11, "hash_ids": [1]}\n',
    "unterminated_csv": b'Timestamp,Model,Request tokens,Response tokens\n0,GPT-4,"12,5\n',
    "deep_json": b"[" * 100_000 + b"]" * 100_000,
}
VLLM_FILE_KINDS = {"sharegpt": [], "custom": ["--skip-chat-template"], "custom_image": ["--backend", "openai-chat",
                   "--endpoint", "/v1/chat/completions"], "timed_trace": ["--backend", "vllm"], "burstgpt": [],
                   "spec_bench": []}  # fmt: skip
SGLANG_FILE_KINDS = {"sharegpt": [], "custom": [], "openai": [], "agentic-trace": [], "mooncake": []}


def test_the_file_kinds_are_every_carried_kind_that_reads_a_file() -> None:
    """The hub kinds (hf, mmmu, longbench_v2, speed-bench) and the generated ones take no --dataset-path here:
    tests/perf/test_vllm_hub_datasets.py and test_bench_sglang_datasets.py cover them."""
    vllm_kinds = set(vllm._DATASETS) - {"random", "random-mm", "prefix_repetition", "hf"}
    assert vllm_kinds == set(VLLM_FILE_KINDS)
    sglang_kinds = set(sgl.DATASETS) | set(sgl.SGLANG_DRAWN)
    assert sglang_kinds - {"random", "random-ids", "generated-shared-prefix", "image", "mmmu", "longbench_v2",
                           "speed-bench"} == set(SGLANG_FILE_KINDS)  # fmt: skip


def _file(tmp_path: Path, name: str, kind: str) -> Path:
    suffix = ".csv" if kind == "burstgpt" else ".jsonl" if kind in ("custom", "custom_image", "spec_bench",
                                                                     "timed_trace", "openai", "mooncake") else ".json"
    path = tmp_path / f"{name}{suffix}"
    path.write_bytes(HOSTILE[name])
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(VLLM_FILE_KINDS))
def test_vllm_file_kinds_name_the_file_of_hostile_input(tok: Path, tmp_path: Path, kind: str) -> None:
    for name in HOSTILE:
        path = _file(tmp_path, name, kind)
        argv = shlex.split(f"--model m --tokenizer {tok} --dataset-name {kind} --dataset-path {path} --num-prompts 2 "
                           f"--result-dir {tmp_path}") + VLLM_FILE_KINDS[kind]  # fmt: skip
        _accepted_or_named(_vllm_prepare, argv, (path.name, "--dataset-path", "--num-prompts", "request"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(SGLANG_FILE_KINDS))
def test_sglang_file_kinds_name_the_file_of_hostile_input(tok: Path, tmp_path: Path, kind: str) -> None:
    for name in HOSTILE:
        path = _file(tmp_path, name, kind)
        more = ["--backend", "sglang"] if kind == "mooncake" else ["--backend", "sglang-oai-chat"]
        argv = shlex.split(f"--port 1 --tokenizer {tok} --dataset-name {kind} --dataset-path {path} --num-prompts 2 "
                           f"--output-file {tmp_path / 'o.jsonl'}") + more  # fmt: skip
        _accepted_or_named(_sglang_prepare, argv, (path.name, "--dataset-path", "--dataset-name", "request"))
