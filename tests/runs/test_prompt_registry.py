"""Prompts as named, versioned templates: a task file that names `prompt: mcq@1` asks with the text of
prompts/mcq@1.txt; the run log records its name, version and SHA-256 (checked against a hash of the file
computed here), prompts.lock maps it to that hash, `runs compare` lists the prompt difference of two runs
first, and a prompt whose text changed without a new version is refused (exit 2). Prompts registered in
Python resolve the same way."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import lmmbench.evaluation as evaluation_pkg
from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.core.runs.log import load_run_log
from lmmbench.evaluation import EvalConfig, run_eval
from lmmbench.evaluation.prompt_registry import PROMPTS, register_prompt, resolve_prompt
from lmmbench.sessions.runs_session import compare_runs

V1 = "Question: {{question}}\nAnswer:"
V2 = "Q: {{question}}\nA:"


def _task_dir(tmp_path: Path) -> Path:
    tasks = tmp_path / "tasks"
    (tasks / "prompts").mkdir(parents=True)
    shutil.copytree(Path(evaluation_pkg.__file__).parent / "tasks" / "data", tasks / "data")
    (tasks / "prompts" / "mcq@1.txt").write_text(V1, encoding="utf-8")
    (tasks / "prompts" / "mcq@2.txt").write_text(V2, encoding="utf-8")
    return tasks


def _write_task(tasks: Path, ref: str) -> Path:
    path = tasks / "mc.yaml"
    path.write_text(f"task: mc\nkind: multiple_choice\ndata: {{path: data/sample_mc.jsonl}}\nprompt: {ref}\n"
                    "doc_to_choice: choices\ndoc_to_target: answer\nmetrics: [acc]\n", encoding="utf-8")
    return path


def _eval(task: Path, out: Path) -> str:
    cfg = EvalConfig.model_validate({"model": "tiny-llm", "tasks": [str(task)], "limit": 4, "out_dir": out,
                                     "threads": 1})  # fmt: skip
    return load_run_log(run_eval(cfg, show_progress=False).run_dir).run_id


def test_a_task_files_prompt_is_versioned_hashed_locked_and_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 's.sqlite'}")
    tasks = _task_dir(tmp_path)
    a = _eval(_write_task(tasks, "mcq@1"), tmp_path / "a")
    b = _eval(_write_task(tasks, "mcq@2"), tmp_path / "b")
    sha1, sha2 = (hashlib.sha256(t.encode()).hexdigest() for t in (V1, V2))
    log_a = load_run_log(next((tmp_path / "a").rglob("run.json")))
    assert [(p["name"], p["version"], p["sha256"]) for p in log_a.config["prompts"]] == [("mcq", "1", sha1)]
    assert (tasks / "prompts.lock").read_text().count(sha1) == 1 and sha2 in (tasks / "prompts.lock").read_text()

    result = compare_runs([a], [b])
    assert result.prompt_diff == [("prompt mcq", f"mcq@1 (sha256 {sha1[:12]})", f"mcq@2 (sha256 {sha2[:12]})")]
    assert not any(k.startswith("config.prompts") for k, _, _ in result.config_diff)
    capsys.readouterr()
    assert main(["runs", "compare", a, b]) in (0, 3)
    out = capsys.readouterr().out
    first_difference = out.split("differences (metrics are compared on what the runs share):\n")[1].splitlines()[0]
    assert first_difference.strip().startswith("prompt mcq: 'mcq@1 (sha256")  # prompts first, then config


def test_a_changed_prompt_without_a_new_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = _task_dir(tmp_path)
    monkeypatch.chdir(tasks)  # eval --prompt (and plan rows) read ./prompts/ and ./prompts.lock
    locked = {"version": 1, "prompts": {"mcq@1": hashlib.sha256(V1.encode()).hexdigest()}}
    (tasks / "prompts.lock").write_text(json.dumps(locked), encoding="utf-8")
    (tasks / "prompts" / "mcq@1.txt").write_text(V1 + " ", encoding="utf-8")  # edited in place
    code = main(["eval", "--model", "tiny-llm", "--tasks", "sample_mc", "--prompt", "mcq@1", "--limit", "2",
                 "--out-dir", str(tmp_path / "o")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "mcq@1" in err and "changed without a new version" in err and "Traceback" not in err


def test_python_registered_prompts_and_bad_references(tmp_path: Path) -> None:
    prompt = register_prompt("lmmbench-test-py", "3", "Say {{x}}.")
    assert resolve_prompt("lmmbench-test-py@3", tmp_path) is prompt and "lmmbench-test-py@3" in PROMPTS
    assert prompt.sha256 == hashlib.sha256(b"Say {{x}}.").hexdigest()
    with pytest.raises(UserError, match="already registered"):
        register_prompt("lmmbench-test-py", "3", "other text")
    with pytest.raises(UserError, match="name@version"):
        resolve_prompt("no-version", tmp_path)
    with pytest.raises(UserError, match="not found"):
        resolve_prompt("missing@1", tmp_path)


def test_a_lock_of_a_newer_version_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    from lmmbench.evaluation.task_files import load_task_file

    tasks = _task_dir(tmp_path)
    task = _write_task(tasks, "mcq@1")
    newer = json.dumps({"version": 2, "prompts": {}, "signatures": {"mcq@1": "x"}})
    (tasks / "prompts.lock").write_text(newer, encoding="utf-8")
    with pytest.raises(UserError, match=r"prompts.lock: prompt lock version 2 is newer than this lmmbench reads"):
        load_task_file(task)
    assert (tasks / "prompts.lock").read_text(encoding="utf-8") == newer  # not rewritten as version 1


def test_a_lock_that_is_a_folder_is_refused_and_leaves_no_temp_file(tmp_path: Path) -> None:
    from lmmbench.evaluation.task_files import load_task_file

    tasks = _task_dir(tmp_path)
    task = _write_task(tasks, "mcq@1")
    (tasks / "prompts.lock").mkdir()
    with pytest.raises(UserError, match=r"prompts.lock: the prompt lock is not a file"):
        load_task_file(task)
    assert sorted(p.name for p in tasks.iterdir() if p.name.startswith("prompts")) == ["prompts", "prompts.lock"]
