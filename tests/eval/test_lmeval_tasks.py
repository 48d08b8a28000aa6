"""lm-evaluation-harness task files run unchanged: lm-eval's numbers (stored), its filters, clear errors.

``tests/eval/lmeval_tasks/lm_eval_reference.json`` was written by lm-eval 0.4.13 itself
(``benchmarks/lmeval_taskfile_crosscheck.py --write-reference``: tiny-llm, float32, CPU, batch size 1,
one torch thread); the test runs the same task files with lmmbench and needs no lm-eval.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError
from lmmbench.evaluation import EvalConfig, run_eval
from lmmbench.evaluation.lmeval.compare import compare_run
from lmmbench.evaluation.lmeval.filters import apply_pipeline
from lmmbench.evaluation.task_config import FilterPipeline
from lmmbench.evaluation.task_files import load_task_file
from lmmbench.evaluation.task_registry import resolve_selection

TASKS_DIR = Path(__file__).parent / "lmeval_tasks"
TASKS = ["lmm_group", "lmm_mc_include", "lmm_lastword", "lmm_ppl", "lmm_gen"]


def test_lmeval_task_files_give_lm_evals_stored_numbers(tmp_path: Path) -> None:
    """Every log-likelihood within 1e-6 + 1e-6 * |lm-eval's value|, everything else exactly or within 1e-6.

    The reference was stored on another machine. float32 log-likelihoods of magnitude 30-500 (sums of
    log-softmax over a 100-token vocabulary) differ by one float32 ULP between CPUs: 3.8e-6 to 3.8e-5
    absolute, about 1e-7 relative (an AMD EPYC CI machine against the machine that wrote the reference). A
    relative tolerance of 1e-6 is ten times that; at the largest magnitude stored (313) it allows 3.1e-4,
    still about 40 times below the smallest gap between two choices' log-likelihoods in the reference
    (0.014), so no argmax can move inside it. Aggregates (accuracies) must still agree to 1e-6.
    """
    reference = json.loads((TASKS_DIR / "lm_eval_reference.json").read_text())
    assert reference["lm_eval_version"].startswith("0.4") and reference["threads"] == 1
    cfg = EvalConfig(model="tiny-llm", tasks=TASKS, include_path=[TASKS_DIR], out_dir=tmp_path, batch_size=1, threads=1)
    run = run_eval(cfg, show_progress=False)
    tasks = resolve_selection(TASKS, [TASKS_DIR]).tasks
    assert sorted(t.task for t in tasks) == sorted(reference["tasks"])
    report = compare_run(reference, tasks, run.run_dir, run.results)
    bad = {k: v for k, v in report["tasks"].items() if not v["ok"]}
    assert report["ok"], (bad, report["groups"])
    assert report["ll_rtol"] == 1e-6 and all(v["max_rel_ll_diff"] <= 1e-6 for v in report["tasks"].values())
    # everything was compared: every choice / document scored, generations and filters, group aggregates
    n_ll = {k: v["loglikelihoods"] for k, v in report["tasks"].items()}
    assert n_ll == {
        "lmm_mc_fewshot": 36,
        "lmm_mc_selfshot": 54,
        "lmm_mc_include": 36,
        "lmm_lastword": 8,
        "lmm_ppl": 6,
        "lmm_gen": 0,
    }
    assert set(report["groups"]["lmm_group"]["aggregates"]) == {
        "acc:value",
        "acc:stderr",
        "acc_norm:value",
        "acc_norm:stderr",
    }
    group_file = json.loads((run.run_dir / "results" / "lmm_group.json").read_text())
    assert group_file["members"] == ["lmm_mc_fewshot", "lmm_mc_selfshot"] and group_file["n_samples"] == 30
    assert "| lmm_group | acc |" in (run.run_dir / "summary" / "summary.md").read_text()
    gen_aggs = set(report["tasks"]["lmm_gen"]["aggregates"])
    assert {"exact_match,strict-match:value", "exact_match,loose:value"} <= gen_aggs


def test_cli_runs_an_lmeval_file_and_names_an_unsupported_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "eval",
            "--model",
            "tiny-llm",
            "--tasks",
            str(TASKS_DIR / "lmm_lastword.yaml"),
            "--out-dir",
            str(tmp_path),
            "--threads",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "lmm_lastword (8 samples, 0 failed): perplexity=" in out
    bad = tmp_path / "bad.yaml"
    text = (TASKS_DIR / "lmm_lastword.yaml").read_text().replace("test_split: test", "test_split: test\nuse_prompt: x")
    bad.write_text(text)
    code = main(["eval", "--model", "tiny-llm", "--tasks", str(bad), "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "lm-eval key 'use_prompt' is not supported" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("process_docs: !function utils.process_docs\n", "key 'process_docs': '!function utils.process_docs'"),
        ("generation_kwargs:\n  until: ['x']\n", "generation_kwargs apply to output_type generate_until only"),
        ("fewshot_config:\n  sampler: balanced\n", "fewshot_config.sampler 'balanced' is not supported"),
        ("repeats: 4\n", "repeats other than 1"),
    ],
)
def test_unsupported_lmeval_settings_are_one_clear_error(tmp_path: Path, extra: str, message: str) -> None:
    body = (TASKS_DIR / "lmm_mc_fewshot.yaml").read_text().replace("data/", str(TASKS_DIR / "data") + "/")
    path = tmp_path / "t.yaml"
    path.write_text(body + extra)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_task_file(path)


def test_metric_and_filter_errors_and_group_lookup(tmp_path: Path) -> None:
    base = (TASKS_DIR / "lmm_gen.yaml").read_text().replace("data/", str(TASKS_DIR / "data") + "/")
    (tmp_path / "m.yaml").write_text(base.replace("aggregation: mean", "aggregation: median"))
    with pytest.raises(UserError, match="aggregation 'median' of 'exact_match' is not supported"):
        load_task_file(tmp_path / "m.yaml")
    (tmp_path / "f.yaml").write_text(base.replace("function: lowercase", "function: majority_vote"))
    with pytest.raises(UserError, match="filter function 'majority_vote' is not supported"):
        load_task_file(tmp_path / "f.yaml")
    (tmp_path / "g.yaml").write_text("group: g\ntask: [lmm_mc_fewshot, nowhere]\n")
    with pytest.raises(UserError, match="'nowhere' not found"):
        resolve_selection([str(tmp_path / "g.yaml")], [TASKS_DIR])
    (tmp_path / "a.yaml").write_text("include: b.yaml\ntask: a\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\noutput_type: loglikelihood\n")
    with pytest.raises(UserError, match="includes itself"):
        load_task_file(tmp_path / "a.yaml")


def test_include_merges_and_lmmbench_files_are_still_lmmbenchs() -> None:
    inc = load_task_file(TASKS_DIR / "lmm_mc_include.yaml")
    assert inc.task == "lmm_mc_include" and inc.kind == "multiple_choice"
    assert inc.doc_to_choice == "choices" and inc.doc_to_target == 0  # from the included file / an int target
    assert inc.fewshot.sampler == "first_n" and inc.fewshot.exclude_eval_doc is True
    self_shot = load_task_file(TASKS_DIR / "lmm_mc_selfshot.yaml")
    assert self_shot.fewshot.exclude_eval_doc is False and self_shot.fewshot.source is None  # lm-eval 0.4.13's rule
    assert load_task_file(Path(__file__).parents[2] / "src/lmmbench/evaluation/tasks/sample_mc.yaml").kind


def test_regex_filter_follows_lm_evals_findall_semantics() -> None:
    pipe = FilterPipeline.model_validate(
        {
            "name": "x",
            "steps": [
                {"function": "regex", "options": {"regex_pattern": r"(\d+)|([a-z]+)", "group_select": 1}},
                {"function": "take_first"},
            ],
        }
    )
    # findall gives tuples of groups: the second match is ('', 'abc'); its first non-empty group
    assert apply_pipeline(pipe, "12 abc 7") == "abc"
    with pytest.raises(IndexError):  # lm-eval raises too when group_select is past the matches
        apply_pipeline(pipe, "12")
    default = FilterPipeline.model_validate({"name": "d", "steps": [{"function": "regex"}]})
    assert apply_pipeline(default, "so #### -1,234.5 \n") == "-1,234.5"
    assert apply_pipeline(default, "no answer") == "[invalid]"
    lower = FilterPipeline.model_validate(
        {"name": "l", "steps": [{"function": "lowercase"}, {"function": "remove_whitespace"}]}
    )
    assert apply_pipeline(lower, "  Paris \n") == "paris"


def test_tag_names_select_every_tagged_task(tmp_path: Path) -> None:
    body = (TASKS_DIR / "lmm_lastword.yaml").read_text().replace("data/", str(TASKS_DIR / "data") + "/")
    for name in ("one", "two"):
        (tmp_path / f"{name}.yaml").write_text(body.replace("task: lmm_lastword", f"task: {name}\ntag: both"))
    (tmp_path / "notes.yaml").write_text("just: a mapping\n")  # not a task file: not indexed, not an error
    sel = resolve_selection(["both"], [tmp_path])
    assert [t.task for t in sel.tasks] == ["one", "two"] and not sel.groups
    with pytest.raises(UserError, match="is not a folder"):
        resolve_selection(["both"], [tmp_path / "missing"])
