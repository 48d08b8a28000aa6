"""benchmarks/lmeval_coverage.py: tasks of the installed lm-eval whose code rejects a guessed row are built after
the row is repaired from the error their own code raised, and their requests compare equal; a request that differs
from the instance is reported (the comparison is exact)."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def coverage() -> Any:
    sys.path.insert(0, str(_DIR))
    try:
        spec = importlib.util.spec_from_file_location("lmeval_coverage", _DIR / "lmeval_coverage.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["lmeval_coverage"] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(_DIR))
    return module


@pytest.fixture(scope="module")
def task_manager(coverage: Any) -> Any:
    import datasets
    from lm_eval.tasks import TaskManager

    datasets.disable_progress_bars()
    logging.getLogger("lm-eval").setLevel(logging.ERROR)
    coverage.keep_synthetic_rows()
    coverage.stub_unavailable_metrics()
    return TaskManager()


def _darija_labels() -> Any:
    from lm_eval.tasks.darija_bench.darija_sentiment import utils

    return utils.out_dic


# (task, the field the repair changed, what the task's own code accepts there)
REPAIRED = [
    ("xcopa_et", "question", lambda v: v in ("cause", "effect")),  # xcopa: connector[doc["question"]]
    ("arabic_leaderboard_acva_Arabic_Culture", "answer", lambda v: v in ("صح", "خطأ")),  # ["صح", "خطأ"].index(answer)
    ("kmmlu_chemistry", "answer", lambda v: isinstance(v, int)),  # template: ['A', 'B', 'C', 'D'][answer-1]
    ("leaderboard_musr_murder_mysteries", "choices", lambda v: isinstance(v, str) and v[0] == "["),  # literal_eval
    ("evalita-mp_ner_adg_p1", "entities", lambda v: all(set(e) == {"entity_text", "type"} for e in v)),
    # score: options_format.format(..) of a field that held "\boxed{1}": a format template keeps no stray braces
    ("non_greedy_robustness_math_algebra", "options_format", lambda v: "{" not in v and "}" not in v),
    # bigbench template b: multiple_choice_scores.index(1)
    ("bigbench_strategyqa_multiple_choice", "multiple_choice_scores", lambda v: v[0] == 1),
    # glianorex: "".join(f"{k}. {v}" for k, v in option_choices.items()), option_choices = doc["options"]
    ("glianorex", "options", lambda v: isinstance(v, dict) and list(v)[:2] == ["A", "B"]),
    # darija_sentiment: alpha[out_dic[doc["messages"][1]["content"]]]: the message text is a key of its label table
    ("darija_sentiment_mac", "messages", lambda v: v[1]["content"] in _darija_labels()),
    # metabench: 5 few-shot columns named by f-strings in range loops, doc["sentence"].index("_")
    ("metabench_winogrande", "sentence", lambda v: "_" in v),
]


@pytest.mark.parametrize(("task", "field", "accepted"), REPAIRED, ids=[t for t, _, _ in REPAIRED])
def test_row_repaired_from_the_tasks_error(coverage: Any, task_manager: Any, task: str, field: str,
                                           accepted: Any) -> None:  # fmt: skip
    row = coverage.check_task(task_manager, task, None)
    assert row["status"] == "equal", row
    assert row["n_instances"] > 0
    assert accepted(row["overrides"][field]), row["overrides"]


def test_filter_that_empties_the_split_keeps_the_row(coverage: Any, task_manager: Any) -> None:
    # mmlu_prox's process_docs keeps the rows whose "category" is the subject: the guessed row has none
    row = coverage.check_task(task_manager, "mmlu_prox_de_biology", None)
    assert row["status"] == "equal", row
    assert "category" in row["extra"]


def test_row_without_the_fields_process_docs_writes(coverage: Any, task_manager: Any) -> None:
    # AlGhafa's process_docs takes every key but query/label as an option and writes "choices"/"gold" itself:
    # the row its templates suggest (with those two) makes an option list of a list and an int
    row = coverage.check_task(task_manager, "arabic_leaderboard_alghafa_mcq_exams_test_ar", None)
    assert row["status"] == "equal", row
    assert row["stored_fields"] is True
    assert row["n_instances"] == 4  # one request per plain option field


def test_row_without_the_fields_a_shared_helper_writes(coverage: Any, task_manager: Any) -> None:
    # SCORE's process_docs is a partial of a helper in another module that adds "prompt" / "options_format" to
    # every row (and reads prompt_template["prompt"] from a JSON file, which is not a read of the document)
    row = coverage.check_task(task_manager, "option_order_robustness_agieval_lsat_lr", None)
    assert row["status"] == "equal", row
    assert row["stored_fields"] is True


def test_fewshot_pool_of_distinct_rows(coverage: Any, task_manager: Any) -> None:
    # gsm8k_platinum samples its 5 shots from its test split, leaving out every row equal to the evaluated one
    row = coverage.check_task(task_manager, "gsm8k_platinum", None)
    assert row["status"] == "equal", row
    assert row["n_instances"] == 1


def test_coverage_run_stand_ins_raise_when_used(coverage: Any, task_manager: Any) -> None:
    import datasets

    metric = datasets.load_metric("f1")  # gone from datasets 5; basqueglue imports it
    with pytest.raises(RuntimeError, match="not available here"):
        metric.compute(predictions=[1], references=[1])
    # humaneval's module runs code_eval once at import (a self-test): that call gets no result, a later one raises
    row = coverage.check_task(task_manager, "humaneval", None)
    assert row["status"] == "equal", row
    from lm_eval.tasks.humaneval import utils

    with pytest.raises(RuntimeError, match="not available here"):
        utils.pass_at_k(["assert True"], [["pass"]], k=[1])


def test_a_request_that_differs_is_reported(coverage: Any) -> None:
    from lmmbench.evaluation.lmeval.catalogue import make_lm

    class Inst:
        request_type = "generate_until"
        args = ("Q: 1+1?\nA:", {"until": ["\n"], "max_gen_toks": 16})

    backend = coverage.RecordingBackend()
    make_lm(backend).generate_until([Inst()])
    ((kind, req),) = backend.sent
    assert coverage._diff_one("generate_until", kind, Inst.args, req) == []
    other = ("Q: 1+1?\nA:", {"until": ["\n\n"], "max_gen_toks": 17})
    diffs = coverage._diff_one("generate_until", kind, other, req)
    assert any("stop" in d for d in diffs) and any("max_tokens" in d for d in diffs), diffs
    assert coverage._diff_one("generate_until", kind, ("Q: 2?", Inst.args[1]), req) == ["generate_until: prompt"]
