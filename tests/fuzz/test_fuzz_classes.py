"""One whole-command case for each class of hostile input the drop-ins, templates, episodes, catalogue and run
tools once mishandled: code run from a downloaded template, a crash on a typed value, the user's own code blamed
on lmmbench, a bad value accepted with exit 0, a count past the limits table, a wait without end, a usage block
instead of one line, a check that came after the cost. Each is exit 2, one ``error:`` line holding the expected
text, no traceback and no crash file, within its time bound; nothing the hostile input asked for happened."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from lmmbench.cli.main import main
from lmmbench.testing import build_word_tokenizer

ESCAPE = "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}"
MC_TASK = ("task: t\nkind: multiple_choice\ndata: {path: data.jsonl}\ndoc_to_text: \"TEXT\"\n"
           "doc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{answer}}\"\n")  # fmt: skip
MODULE = """
import sys
class Broken:
    def __init__(self, *args):
        raise RuntimeError("boom in the user's constructor")
class Exits:
    def __init__(self, *args):
        sys.exit(3)
"""


def _tokenizer(tmp: Path, template: str | None = None) -> Path:
    folder = build_word_tokenizer(tmp / "tok", [])
    if template is not None:
        (folder / "chat_template.jinja").write_text(template)
    return folder


def _custom(tmp: Path) -> Path:
    path = tmp / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "hello", "output_tokens": 2}) + "\n")
    return path


def _serve(tmp: Path, *more: str, template: str | None = None) -> list[str]:
    return ["bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer",
            str(_tokenizer(tmp, template)), "--random-input-len", "6", "--random-output-len", "3", "--num-prompts",
            "2", "--result-dir", str(tmp / "res"), *more]  # fmt: skip


def _sglang(tmp: Path, *more: str) -> list[str]:
    return ["bench", "sglang", "--port", "9", "--tokenizer", str(_tokenizer(tmp)), "--dataset-name", "random",
            "--random-input-len", "6", "--random-output-len", "3", "--num-prompts", "2", "--output-file",
            str(tmp / "o.jsonl"), *more]  # fmt: skip


def _task(tmp: Path, text: str) -> list[str]:
    (tmp / "data.jsonl").write_text(json.dumps({"q": "x", "choices": ["a", "b"], "answer": 0}) + "\n")
    (tmp / "t.yaml").write_text(MC_TASK.replace("TEXT", text.replace('"', '\\"')))
    return ["eval", "--model", "tiny-llm", "--tasks", str(tmp / "t.yaml"), "--out-dir", str(tmp / "out")]


def _lock(tmp: Path) -> list[str]:
    (tmp / "prompts").mkdir()
    (tmp / "prompts" / "p@1.txt").write_text("{{q}}")
    (tmp / "prompts.lock").write_text(json.dumps({"version": 9, "prompts": {}}))
    argv = _task(tmp, "{{q}}")
    (tmp / "t.yaml").write_text((tmp / "t.yaml").read_text().replace('doc_to_text: "{{q}}"', "prompt: p@1"))
    return argv


def _episodes(tmp: Path, policy: str) -> list[str]:
    (tmp / "mine.py").write_text(MODULE)
    return ["run", "episodic-eval", "--policy", f"{tmp / 'mine.py'}:{policy}", "--num-tasks", "1",
            "--num-trials-per-task", "1", "--no-progress", "--out-dir", str(tmp / "out")]  # fmt: skip


def _plan(tmp: Path) -> list[str]:
    plan = {"name": "p", "out_dir": str(tmp / "out"), "rows": [
        {"name": "never", "kind": "serve", "options": {"command": "sleep 60 {port}", "ready_timeout_s": 1e30}},
        {"name": "load", "kind": "perf", "server": "never", "options": {"num_requests": 1}}]}  # fmt: skip
    (tmp / "plan.yaml").write_text(yaml.safe_dump(plan))
    return ["batch", str(tmp / "plan.yaml")]


CASES: dict[str, tuple[Callable[[Path], list[str]], str, float]] = {  # id -> (argv, expected text, seconds)
    "code-vllm-chat-template": (lambda t: _serve(t, "--dataset-name", "custom", "--dataset-path", str(_custom(t)),
                                                 template=ESCAPE), "chat_template.jinja: the chat template", 20),
    "code-task-template": (lambda t: _task(t, ESCAPE), "sandbox refuses", 30),
    "crash-sglang-rate-nan": (lambda t: _sglang(t, "--request-rate", "nan"), "--request-rate nan", 20),
    "crash-vllm-burstiness-0": (lambda t: _serve(t, "--request-rate", "5", "--burstiness", "0"), "--burstiness", 20),
    "user-code-constructor": (lambda t: _episodes(t, "Broken"), "Broken() raised RuntimeError", 30),
    "user-code-sys-exit": (lambda t: _episodes(t, "Exits"), "Exits() raised SystemExit: 3", 30),
    "accepted-metadata-overwrite": (lambda t: _serve(t, "--metadata", "backend=evil"), "'backend' is a key", 20),
    "accepted-newer-prompt-lock": (_lock, "prompt lock version 9 is newer", 30),
    "limit-num-prompts": (lambda t: _serve(t, "--num-prompts", "100000000000"), "limit requests", 20),
    "hang-ready-timeout": (_plan, "exceeds the limit duration_s", 20),
    "hang-port-70000": (lambda t: _sglang(t, "--port", "70000"), "--port 70000", 20),
    "usage-block-argparse": (lambda t: _serve(t, "--request-rate", "fast"), "--request-rate: invalid float", 20),
    "late-output-folder": (lambda t: _sglang(t, "--output-file", str(t / "missing" / "o.jsonl")), "does not exist",
                           20),
    "slow-unknown-catalogue-name": (lambda t: ["eval", "--model", "tiny-llm", "--tasks", "no_such_task_i35",
                                               "--out-dir", str(t / "out")], "no_such_task_i35", 20),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_class_of_hostile_input_is_one_line_exit_2(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    build, expect, seconds = CASES[case]
    monkeypatch.chdir(tmp_path)
    argv = build(tmp_path)
    logs = Path(os.environ["LMMBENCH_HOME"]) / "logs"
    crashes = set(logs.glob("crash-*")) if logs.is_dir() else set()
    start = time.monotonic()
    code = main(argv)
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and expect in lines[0], (code, err[-2000:])
    assert "Traceback" not in err and elapsed < seconds, elapsed
    assert (set(logs.glob("crash-*")) if logs.is_dir() else set()) == crashes  # not reported as lmmbench's bug
    assert not (tmp_path / "PWNED").exists()
