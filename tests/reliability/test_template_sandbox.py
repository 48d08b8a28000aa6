"""Templates from files never run code: every renderer of lmmbench (the chat templates of both drop-ins, task files
and registered prompt files) renders in jinja2's ImmutableSandboxedEnvironment, and a template that tries to reach
Python's internals or mutate a list is one line naming the file. The tokenizer folders are real files, rendered
through the drop-ins' own request builders; the escape would ``touch`` a file, and the test checks it is absent."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from lmmbench.cli.main import main
from lmmbench.config.dropins import sglang_serving as sglang_bench_serving
from lmmbench.config.dropins import vllm_serve as vllm_bench_serve
from lmmbench.core.errors import UserError
from lmmbench.datasets.chat_templates import find_chat_template, sandboxed_environment
from lmmbench.evaluation.prompts import PromptRenderer
from lmmbench.evaluation.runner import build_jobs
from lmmbench.evaluation.task_files import load_task_file
from lmmbench.sessions.dropins.sglang_datasets import draw_sglang_requests
from lmmbench.sessions.dropins.vllm_session import build_bench_requests
from lmmbench.testing import build_word_tokenizer


def _escapes(marker: Path) -> list[tuple[str, str]]:
    """(template, what the sandbox refuses) for the three escapes: a function's globals, the class tree, a
    list's append."""
    return [
        ("{{ cycler.__init__.__globals__.os.popen('touch " + str(marker) + "').read() }}", "__init__"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "__class__"),
        ("{% set x = [] %}{{ x.append(1) }}{{ x }}", "append"),
    ]


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_word_tokenizer(tmp_path_factory.mktemp("tok"), [])


def _tokenizer_with(tmp_path: Path, tok: Path, name: str, template: str) -> Path:
    folder = tmp_path / f"tok-{abs(hash((name, template)))}"
    folder.mkdir()
    (folder / "tokenizer.json").write_text((tok / "tokenizer.json").read_text())
    if name == "chat_template.jinja":
        (folder / name).write_text(template)
    else:  # tokenizer_config.json or chat_template.json: a JSON object with a chat_template entry
        (folder / name).write_text(json.dumps({"chat_template": template}))
    return folder


def test_chat_templates_render_in_the_immutable_sandbox() -> None:
    assert isinstance(sandboxed_environment(), ImmutableSandboxedEnvironment)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "chat_template.jinja", "chat_template.json"])
def test_vllm_drop_in_chat_template_is_sandboxed(tok: Path, tmp_path: Path, name: str) -> None:
    custom = tmp_path / "rows.jsonl"
    custom.write_text(json.dumps({"prompt": "hello", "output_tokens": 2}) + "\n")
    marker = tmp_path / "pwned"
    for template, refused in _escapes(marker):
        folder = _tokenizer_with(tmp_path, tok, name, template)
        ns = vllm_bench_serve.build_parser().parse_args(shlex.split(
            f"--model m --dataset-name custom --dataset-path {custom} --num-prompts 1 --tokenizer {folder}"))
        vllm_bench_serve.translate(ns)
        with pytest.raises(UserError, match=rf"{name}: the chat template .*sandbox refuses .*{refused}"):
            build_bench_requests(ns)
    assert not marker.exists()


def test_vllm_drop_in_finds_chat_template_jinja(tok: Path, tmp_path: Path) -> None:
    """The current transformers layout (a chat_template.jinja file, which wins over the config's entry)."""
    custom = tmp_path / "rows.jsonl"
    custom.write_text(json.dumps({"prompt": "hello", "output_tokens": 2}) + "\n")
    template = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}"
    folder = _tokenizer_with(tmp_path, tok, "chat_template.jinja", template)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "config's"}))
    ns = vllm_bench_serve.build_parser().parse_args(shlex.split(
        f"--model m --dataset-name custom --dataset-path {custom} --num-prompts 1 --tokenizer {folder}"))
    vllm_bench_serve.translate(ns)
    assert build_bench_requests(ns)[0][0].payload["prompt"] == "<<hello>>"
    found = find_chat_template(folder)
    assert found is not None and found.source.name == "chat_template.jinja"


def test_vllm_drop_in_tokenizer_config_not_json_is_named(tok: Path, tmp_path: Path) -> None:
    custom = tmp_path / "rows.jsonl"
    custom.write_text(json.dumps({"prompt": "hello", "output_tokens": 2}) + "\n")
    folder = _tokenizer_with(tmp_path, tok, "chat_template.json", "x")
    (folder / "tokenizer_config.json").write_text("{not json")
    ns = vllm_bench_serve.build_parser().parse_args(shlex.split(
        f"--model m --dataset-name custom --dataset-path {custom} --num-prompts 1 --tokenizer {folder}"))
    with pytest.raises(UserError, match=r"tokenizer_config.json: not valid JSON"):
        vllm_bench_serve.translate(ns)
        build_bench_requests(ns)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "chat_template.jinja", "chat_template.json"])
def test_sglang_drop_in_chat_template_is_sandboxed(tok: Path, tmp_path: Path, name: str) -> None:
    rows = tmp_path / "sharegpt.json"
    rows.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hello there"},
                                                   {"from": "gpt", "value": "hi back"}]}]))  # fmt: skip
    marker = tmp_path / "pwned"
    for template, refused in _escapes(marker):
        folder = _tokenizer_with(tmp_path, tok, name, template)
        ns = sglang_bench_serving.build_parser().parse_args(
            ["--port", "1", "--tokenizer", str(folder), "--dataset-name", "sharegpt", "--dataset-path", str(rows),
             "--num-prompts", "1", "--apply-chat-template"])  # fmt: skip
        with pytest.raises(UserError, match=rf"{name}: the chat template .*sandbox refuses .*{refused}"):
            draw_sglang_requests(ns, sglang_bench_serving.translate(ns), lambda: rows)
    assert not marker.exists()


def test_sandbox_refusal_is_one_line_exit_2_from_the_command(tok: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    custom = tmp_path / "rows.jsonl"
    custom.write_text(json.dumps({"prompt": "hello", "output_tokens": 2}) + "\n")
    marker = tmp_path / "pwned"
    folder = _tokenizer_with(tmp_path, tok, "tokenizer_config.json", _escapes(marker)[0][0])
    code = main(["bench", "serve", "--model", "m", "--dataset-name", "custom", "--dataset-path", str(custom),
                 "--num-prompts", "1", "--tokenizer", str(folder), "--base-url", "http://127.0.0.1:9",
                 "--result-dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not marker.exists()
    assert len(err) == 1 and "tokenizer_config.json" in err[0] and "sandbox" in err[0], err


MC_YAML = """task: t
kind: multiple_choice
data: {path: data.jsonl}
doc_to_text: "TEMPLATE"
doc_to_choice: "{{choices}}"
doc_to_target: "{{answer}}"
"""


def _task(tmp_path: Path, template: str) -> Path:
    (tmp_path / "data.jsonl").write_text(json.dumps({"q": "x", "choices": ["a", "b"], "answer": 0}) + "\n")
    path = tmp_path / "task.yaml"
    path.write_text(MC_YAML.replace("TEMPLATE", template.replace('"', '\\"')))
    return path


def test_task_file_templates_render_in_the_immutable_sandbox(tmp_path: Path) -> None:
    task = load_task_file(_task(tmp_path, "{{q}}"))
    assert isinstance(PromptRenderer(task, {"q"}).env, ImmutableSandboxedEnvironment)
    marker = tmp_path / "pwned"
    for template, refused in _escapes(marker):
        path = _task(tmp_path, template)
        with pytest.raises(UserError, match=rf"task.yaml: field 'doc_to_text': .*sandbox refuses .*{refused}"):
            build_jobs(load_task_file(path), "m")
    assert not marker.exists()


def test_prompt_file_templates_are_sandboxed_and_the_prompt_file_named(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    (tmp_path / "prompts").mkdir()
    for i, (template, refused) in enumerate(_escapes(marker)):
        (tmp_path / "prompts" / f"evil@{i}.j2").write_text(template)
        path = _task(tmp_path, "{{q}}")
        path.write_text(path.read_text().replace('doc_to_text: "{{q}}"', f"prompt: evil@{i}"))
        with pytest.raises(UserError, match=rf"evil@{i}.j2 \(prompt evil@{i} of .*task.yaml\): .*sandbox refuses "
                                            rf".*{refused}"):  # fmt: skip
            build_jobs(load_task_file(path), "m")
    assert not marker.exists()
