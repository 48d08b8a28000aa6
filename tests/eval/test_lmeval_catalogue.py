"""lm-evaluation-harness's catalogue by name: eight popular tasks and one group (mmlu_stem), taken unchanged from
the installed lm-eval 0.4.13, on small synthetic rows in each data set's real schema written into the `datasets`
Arrow cache (read offline, as the hub leaves it), give the same prompts, per-sample results and aggregates as
`lm_eval --model hf` on the same model and data.

The reference is computed in the same test run, on the same machine, by lm-eval's own HF model (batch size 1,
float32, one torch thread): log-likelihoods must agree within 1e-6 relative (the batch shapes of the two sides
differ, which moves float32 sums in the last bits; no value stored on another CPU is involved), generations and
prompts exactly, accuracies exactly.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# mmlu_stem is a group of 19 MMLU subjects (mmlu_abstract_algebra among them): lm-eval refuses a task named twice
TASKS = ["arc_easy", "hellaswag", "winogrande", "lambada_openai", "gsm8k", "truthfulqa_mc2", "boolq", "mmlu_stem"]
LIMIT = 3


def _mmlu_stem_subjects() -> list[str]:
    import lm_eval

    folder = Path(lm_eval.__file__).parent / "tasks" / "mmlu" / "default"
    subjects = []
    for f in sorted(glob.glob(str(folder / "mmlu_*.yaml"))):
        data = yaml.safe_load(Path(f).read_text())
        if data.get("tag") == "mmlu_stem_tasks":
            subjects.append(data["dataset_name"])
    return subjects


def _rows() -> dict[tuple[str, str | None], dict[str, list[dict[str, Any]]]]:
    arc = [{"id": f"q{i}", "question": f"Which animal is the largest, number {i}?",
            "choices": {"text": ["an ant", "a whale", "a cat", "a dog"], "label": ["A", "B", "C", "D"]},
            "answerKey": "B"} for i in range(8)]  # fmt: skip
    hella = [{"ind": i, "activity_label": "Cooking", "ctx_a": f"A man cuts onion {i}.", "ctx_b": "then he",
              "ctx": f"A man cuts onion {i}. then he", "endings": ["fries it.", "sings.", "sleeps.", "runs."],
              "source_id": "x", "split": "val", "split_type": "indomain", "label": "0"} for i in range(6)]  # fmt: skip
    wino = [{"sentence": f"The ball did not fit in the box {i} because the _ was too big.", "option1": "ball",
             "option2": "box", "answer": "1"} for i in range(6)]  # fmt: skip
    lamb = [{"text": f"The cat sat on the mat and then the cat {i} went to sleep"} for i in range(4)]
    gsm = [{"question": f"What is {i} plus {i}?", "answer": f"{i} plus {i} is {2 * i}.\n#### {2 * i}"}
           for i in range(12)]  # fmt: skip
    tqa = [{"question": f"Is the earth flat {i}?", "mc1_targets": {"choices": ["No.", "Yes."], "labels": [1, 0]},
            "mc2_targets": {"choices": ["No.", "It is round.", "Yes."], "labels": [1, 1, 0]}} for i in range(4)]
    boolq = [{"question": f"is water wet {i}", "passage": f"Water {i} is a liquid.", "idx": i, "label": i % 2}
             for i in range(8)]  # fmt: skip
    out: dict[tuple[str, str | None], dict[str, list[dict[str, Any]]]] = {
        ("allenai/ai2_arc", "ARC-Easy"): {"train": arc[:3], "validation": arc[3:5], "test": arc[5:]},
        ("Rowan/hellaswag", None): {"train": hella[:3], "validation": hella[3:]},
        ("allenai/winogrande", "winogrande_xl"): {"train": wino[:3], "validation": wino[3:]},
        ("EleutherAI/lambada_openai", "default"): {"test": lamb},
        ("openai/gsm8k", "main"): {"train": gsm[:8], "test": gsm[8:]},
        ("truthfulqa/truthful_qa", "multiple_choice"): {"validation": tqa},
        ("aps/super_glue", "boolq"): {"train": boolq[:3], "validation": boolq[3:]},
    }
    for subject in _mmlu_stem_subjects():
        mmlu = [{"question": f"{subject}: what is {i} + 1?", "subject": subject,
                 "choices": [str(i), str(i + 1), str(i + 2), str(i + 3)], "answer": 1} for i in range(4)]
        out[("cais/mmlu", subject)] = {"test": mmlu[:3], "validation": mmlu[3:], "dev": mmlu[3:]}
    return out


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from lmmbench.testing.hf_datasets import use_offline_cache, write_dataset_cache

    home = tmp_path_factory.mktemp("hf_catalogue")
    mp = pytest.MonkeyPatch()
    use_offline_cache(mp, home)
    for (repo, config), splits in _rows().items():
        write_dataset_cache(home, repo, config, splits)
    yield home
    mp.undo()


def _by_doc(samples: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {(s["doc_id"], s.get("filter")): s for s in samples}  # one entry per document and filter


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)


@pytest.fixture(scope="module")
def both(hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    import torch
    from lm_eval import simple_evaluate

    from lmmbench.evaluation import EvalConfig, run_eval
    from lmmbench.evaluation.lmeval.catalogue import _task_manager
    from lmmbench.models.tiny import build_tiny_model

    torch.set_num_threads(1)
    # lm-eval's side gets the task index lmmbench's run built (cached for the process): indexing lm-eval's
    # ~13,000 task files is the fixture's largest fixed cost, and an index only lists files (each run loads its
    # tasks afresh); no model metadata, which none of these tasks reads
    out = tmp_path_factory.mktemp("catalogue_run")
    ours = run_eval(EvalConfig(model="tiny-llm", tasks=TASKS, limit=LIMIT, batch_size=1, threads=1, out_dir=out,
                               gen_kwargs="max_gen_toks=8", bootstrap_iters=0), show_progress=False)  # fmt: skip
    ref = simple_evaluate(model="hf", model_args=f"pretrained={build_tiny_model('tiny-llm')},dtype=float32,device=cpu",
                          tasks=TASKS, limit=LIMIT, batch_size=1, gen_kwargs="max_gen_toks=8", log_samples=True,
                          bootstrap_iters=0, task_manager=_task_manager(()))  # fmt: skip
    assert ref is not None
    return ours, ref


def test_catalogue_tasks_run_by_name_offline_with_lm_evals_prompts_and_numbers(
    both: tuple[Any, dict[str, Any]],
) -> None:
    import json

    ours, ref = both
    leaf = [t for t in ref["samples"]]
    assert {"arc_easy", "hellaswag", "winogrande", "lambada_openai", "gsm8k", "truthfulqa_mc2", "boolq",
            "mmlu_abstract_algebra"} <= set(leaf)  # fmt: skip
    compared_ll = 0
    for task in leaf:
        mine = [json.loads(x) for x in (ours.run_dir / "predictions" / f"{task}.jsonl").read_text().splitlines()]
        theirs = _by_doc(ref["samples"][task])
        assert len(mine) == len(theirs) > 0, task
        for row in mine:
            t = theirs[(row["doc_id"], row.get("filter"))]
            assert row["prompt"] == t["arguments"][0][0], (task, row["doc_id"])
            for a, b in zip(row["resps"], t["resps"], strict=True):
                if isinstance(b[0], str):
                    assert a[0] == b[0], (task, row["doc_id"])  # generations identical
                else:
                    first_a, first_b = (a[0], b[0]) if isinstance(b[0], (int, float)) else (a[0][0], b[0][0])
                    assert _close(float(first_a), float(first_b)), (task, row["doc_id"], first_a, first_b)
                    compared_ll += 1
    assert compared_ll > 50
    results = {r["task"]: r for r in ours.results}
    for name, row in ref["results"].items():
        for key, value in row.items():
            if "," not in key or "_stderr" in key or not isinstance(value, (int, float)):
                continue
            base, _, flt = key.partition(",")
            metric = base if flt in ("", "none") else f"{base},{flt}"
            assert name in results and metric in results[name]["metrics"], (name, metric)
            mine = results[name]["metrics"][metric]["value"]
            # accuracies exactly; perplexities are exp(-mean LL): an LL within 1e-6 relative (|LL| ~ 20) moves
            # them by up to ~2e-5 relative
            tol = 1e-4 * abs(value) if "perplexity" in metric or "bits_per_byte" in metric else 1e-9
            assert abs(mine - value) <= tol, (name, metric, mine, value)
    assert "mmlu_stem" in results and results["mmlu_stem"]["kind"] == "group"


def test_lm_evals_option_spellings_and_a_fractional_limit_reach_the_run(
    hf_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from lmmbench.cli.main import main

    assert main(["eval", "--model", "tiny-llm", "--tasks", "arc_easy,gsm8k", "--limit", "0.5", "--num_fewshot", "1",
                 "--gen_kwargs", "max_gen_toks=4", "--seed", "7", "--threads", "1", "--out-dir", str(tmp_path)]) == 0
    run = next(tmp_path.glob("*/run.json"))
    config = json.loads(run.read_text())["config"]
    assert config["limit"] == 0.5 and config["num_fewshot"] == 1 and config["gen_kwargs"] == "max_gen_toks=4"
    assert config["seed"] == "7"
    preds = (run.parent / "predictions" / "arc_easy.jsonl").read_text().splitlines()
    assert len(preds) == 2  # ceil(0.5 x 3 test rows), as lm-eval takes a fraction
    assert json.loads(preds[0])["prompt"].count("Question:") == 2  # one few-shot example, then the question
    gen = [json.loads(x) for x in (run.parent / "predictions" / "gsm8k.jsonl").read_text().splitlines()]
    assert gen and all(len(g["resps"][0][0]) < 80 for g in gen)  # max_gen_toks=4 reached the model
    assert main(["eval", "--model", "tiny-llm", "--tasks", "no_such_task_xyz", "--out-dir", str(tmp_path)]) == 2
    assert "no_such_task_xyz" in capsys.readouterr().err


def test_without_lm_eval_a_catalogue_name_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    """lm-eval hidden from the import system (as on a plain install)."""
    import lmmbench.evaluation.lmeval.catalogue as cat
    from lmmbench.core.errors import UserError
    from lmmbench.evaluation import EvalConfig, run_eval

    monkeypatch.setattr(cat, "catalogue_available", lambda: False)
    with pytest.raises(UserError, match=r"lmmbench\[lmeval\]"):
        run_eval(EvalConfig(model="tiny-llm", tasks=["arc_easy"], out_dir=tmp_path), show_progress=False)


def test_a_catalogue_run_is_an_ordinary_eval_run(both: tuple[Any, dict[str, Any]],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Run log, run store, report pages per task and group with standard errors, `runs compare`."""
    import json

    from lmmbench.cli.main import main
    from lmmbench.core.runs.store import RunStore

    ours, ref = both
    log = json.loads((ours.run_dir / "run.json").read_text())
    assert log["kind"] == "eval" and log["finished_at"] and log["outcome"]["ok"] > 0
    assert log["config"]["gen_kwargs"] == "max_gen_toks=8" and log["headline"]
    assert {"report.html", "results/arc_easy.json", "results/mmlu_stem.json"} <= set(log["files"])
    assert any(r.run_id == log["run_id"] for r in RunStore.open().list(kind="eval"))
    for name in ("mmlu_stem", "arc_easy"):  # a group and a task: lm-eval's standard error, or none as lm-eval
        result = json.loads((ours.run_dir / "results" / f"{name}.json").read_text())
        want, got = ref["results"][name]["acc_stderr,none"], result["metrics"]["acc"]["stderr"]
        assert (abs(got - want) <= 1e-9) if isinstance(want, (int, float)) else got is None, (name, got, want)
    assert json.loads((ours.run_dir / "results" / "mmlu_stem.json").read_text())["kind"] == "group"
    html = (ours.run_dir / "report.html").read_text()
    assert "arc_easy" in html and "mmlu_stem" in html and "mmlu_abstract_algebra" in html
    capsys.readouterr()
    assert main(["runs", "compare", str(ours.run_dir), str(ours.run_dir), "--show-all"]) == 0
    out = capsys.readouterr().out
    assert "acc" in out and "0 regression(s)" in out  # per-sample accuracies of the catalogue tasks compared
