"""Task files, data formats, prompt rendering, few-shot sampling and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.core.errors import UserError
from lmmbench.evaluation import SHIPPED_TASKS_DIR, list_tasks, load_task_file, resolve_task
from lmmbench.evaluation.runner import build_jobs
from lmmbench.evaluation.task_data import load_samples

MC_ROWS = [
    {"q": f"Question {i}?", "choices": ["yes", "no", "maybe"], "answer": i % 3, "subject": "s" + str(i % 2)}
    for i in range(6)
]


def _write_task(tmp: Path, body: str, rows: list[dict[str, object]] | None = None, name: str = "t") -> Path:
    if rows is not None:
        (tmp / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp / f"{name}.yaml"
    path.write_text(body)
    return path


MC_YAML = """task: t
kind: multiple_choice
data:
  path: data.jsonl
doc_to_text: "{{q}}\\nAnswer:"
doc_to_choice: choices
doc_to_target: answer
"""


def test_shipped_tasks_are_listed_and_load() -> None:
    infos = {t.name: t for t in list_tasks()}
    for name in ("sample_mc", "sample_qa", "sample_ppl", "sample_vqa", "sample_vqa_count"):
        assert name in infos, name
        assert infos[name].error is None
        assert infos[name].samples and infos[name].samples >= 10
        assert (infos[name].licence or "").startswith("CC0")
    assert (SHIPPED_TASKS_DIR / "data" / "images" / "vqa_00.png").is_file()


def test_prompts_fewshot_and_targets(tmp_path: Path) -> None:
    path = _write_task(tmp_path, MC_YAML + "fewshot:\n  num: 2\n  seed: 7\n", MC_ROWS)
    task = load_task_file(path)
    jobs = build_jobs(task, "m")
    assert len(jobs) == 6
    j = jobs[0]
    # the evaluated sample is never its own example; each example ends with " <answer>\n\n"
    assert j.row["prompt"].endswith("Question 0?\nAnswer:")
    assert j.row["prompt"].count("\n\n") == 2
    assert "Question 0?" not in j.row["prompt"][: -len("Question 0?\nAnswer:")]
    assert [r.continuation for r in j.ll] == [" yes", " no", " maybe"]
    assert j.row["gold"] == 0
    # the same seed gives the same prompts; another seed other ones
    again = build_jobs(load_task_file(path), "m")
    assert [x.row["prompt"] for x in again] == [x.row["prompt"] for x in jobs]
    other = load_task_file(_write_task(tmp_path, MC_YAML + "fewshot:\n  num: 2\n  seed: 8\n", name="u"))
    assert [x.row["prompt"] for x in build_jobs(other, "m")] != [x.row["prompt"] for x in jobs]


def test_csv_and_json_sources(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("q,a\nWhat?,x\nWho?,y\n")
    path = _write_task(
        tmp_path, "task: c\nkind: generate\ndata:\n  path: d.csv\ndoc_to_text: '{{q}}'\ndoc_to_target: a\n"
    )
    assert [r["a"] for r in load_samples(load_task_file(path))] == ["x", "y"]
    (tmp_path / "d.json").write_text(json.dumps({"data": [{"q": "a", "a": "b"}]}))
    path = _write_task(
        tmp_path, "task: j\nkind: generate\ndata:\n  path: d.json\ndoc_to_text: '{{q}}'\ndoc_to_target: a\n", name="j"
    )
    assert load_samples(load_task_file(path)) == [{"q": "a", "a": "b"}]


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _write_task(tmp_path, "task: t\nkind: generate\ndata: [unclosed\n")
    with pytest.raises(UserError, match=r"t\.yaml:\d+: not valid YAML"):
        load_task_file(path)


def test_missing_or_wrong_field_names_the_field(tmp_path: Path) -> None:
    path = _write_task(tmp_path, "task: t\nkind: generate\n")
    with pytest.raises(UserError, match="field 'data'"):
        load_task_file(path)
    path = _write_task(tmp_path, "task: t\nkind: classify\ndata:\n  path: x.jsonl\n")
    with pytest.raises(UserError, match=r"t\.yaml:2: field 'kind'"):
        load_task_file(path)
    path = _write_task(tmp_path, MC_YAML.replace("doc_to_choice: choices\n", ""), MC_ROWS)
    with pytest.raises(UserError, match="doc_to_choice"):
        load_task_file(path)
    path = _write_task(tmp_path, MC_YAML + "metrics: [bleu]\n", MC_ROWS)
    with pytest.raises(UserError, match="metric 'bleu' applies to generate"):
        load_task_file(path)


def test_template_error_names_field_and_sample(tmp_path: Path) -> None:
    path = _write_task(tmp_path, MC_YAML.replace("{{q}}", "{{question}}"), MC_ROWS)
    with pytest.raises(UserError, match=r"field 'doc_to_text'.*sample 0.*'question' is undefined"):
        build_jobs(load_task_file(path), "m")
    path = _write_task(tmp_path, MC_YAML.replace("{{q}}", "{% if %}"), MC_ROWS)
    with pytest.raises(UserError, match="template error"):
        build_jobs(load_task_file(path), "m")


def test_sandbox_blocks_unsafe_templates(tmp_path: Path) -> None:
    body = MC_YAML.replace("{{q}}", "{{ q.__class__.__mro__[1].__subclasses__() }}")
    path = _write_task(tmp_path, body, MC_ROWS)
    with pytest.raises(UserError, match="sandbox refuses"):
        build_jobs(load_task_file(path), "m")


def test_unreadable_data_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text('{"q": "a"}\n{"q": broken}\n')
    path = _write_task(tmp_path, MC_YAML)
    with pytest.raises(UserError, match=r"data\.jsonl:2: not valid JSON"):
        load_samples(load_task_file(path))
    path = _write_task(tmp_path, MC_YAML.replace("data.jsonl", "missing.jsonl"))
    with pytest.raises(UserError, match="does not exist"):
        load_samples(load_task_file(path))


def test_target_not_among_choices_is_clear(tmp_path: Path) -> None:
    rows = [{"q": "x", "choices": ["a", "b"], "answer": "c"}]
    path = _write_task(tmp_path, MC_YAML, rows)
    with pytest.raises(UserError, match="not one of the choices"):
        build_jobs(load_task_file(path), "m")


def test_unknown_task_name_lists_known() -> None:
    with pytest.raises(UserError, match=r"known: .*sample_mc"):
        resolve_task("no_such_task")


def test_parquet_and_saved_datasets_folder(tmp_path: Path) -> None:
    import datasets
    import pandas as pd

    rows = [{"q": "What?", "a": "x"}, {"q": "Who?", "a": "y"}]
    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    body = "task: p\nkind: generate\ndata:\n  path: {path}\ndoc_to_text: '{{{{q}}}}'\ndoc_to_target: a\n"
    path = _write_task(tmp_path, body.format(path="d.parquet"), name="p")
    assert load_samples(load_task_file(path)) == rows
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    path = _write_task(tmp_path, body.format(path="saved") + "", name="h")
    assert load_samples(load_task_file(path)) == rows


def test_limit_keeps_the_whole_split_as_fewshot_pool(tmp_path: Path) -> None:
    full = load_task_file(_write_task(tmp_path, MC_YAML + "fewshot:\n  num: 3\n", MC_ROWS))
    limited = full.model_copy(update={"data": full.data.model_copy(update={"limit": 2})})
    a, b = build_jobs(full, "m"), build_jobs(limited, "m")
    assert len(b) == 2 and [j.row["prompt"] for j in b] == [j.row["prompt"] for j in a[:2]]
    small = load_task_file(_write_task(tmp_path, MC_YAML + "fewshot:\n  num: 6\n", MC_ROWS, name="s"))
    with pytest.raises(UserError, match=r"fewshot\.num 6 needs at least 7 samples"):
        build_jobs(small, "m")


def test_chat_template_few_shot_turns_like_lm_eval(tmp_path: Path) -> None:
    from lmmbench.evaluation.prompts import PromptRenderer, chat_messages

    body = MC_YAML + "description: 'Answer well.'\nchat_template: true\nfewshot:\n  num: 2\n"
    task = load_task_file(_write_task(tmp_path, body, MC_ROWS))
    seen: list[list[dict[str, str]]] = []

    def render(messages: list[dict[str, str]], n_images: int, n_audio: int) -> str:
        seen.append(messages)
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"

    job = build_jobs(task, "m", render)[0]
    roles = [m["role"] for m in seen[0]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert seen[0][0]["content"] == "Answer well." and seen[0][-1]["content"] == "Question 0?\nAnswer:"
    assert job.row["prompt"].endswith("|assistant:")
    assert [r.continuation for r in job.ll] == ["yes", "no", "maybe"]  # no target delimiter after a chat turn
    docs = load_samples(task)
    sample = PromptRenderer(task, set(docs[0])).render_all(docs)[0]
    single = chat_messages(sample, "S", multiturn=False)
    assert [m["role"] for m in single] == ["system", "user"] and single[1]["content"] == sample.user_text
    with pytest.raises(UserError, match="chat_template needs a model"):
        build_jobs(task, "m")
