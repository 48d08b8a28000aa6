"""lm-eval 0.4.13's left truncation: a catalogue generation task (gsm8k, unchanged from the installed lm-eval, 5-shot,
on synthetic rows in its real schema in the offline `datasets` cache) whose prompts exceed a 64-token window gives
the numbers of `lm_eval --model hf` with ``max_length=64`` run live in the same test (its HF model keeps the last
64 − max_gen_toks tokens of each context); the truncated requests are counted per task, in the run log and on the
console; ``--no-truncate`` refuses instead. Log-likelihood truncation is counted the same way on an own task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main

MAX_LENGTH, MAX_GEN, LIMIT = 64, 8, 3


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """gsm8k's train and test splits in an offline `datasets` cache (as tests/eval/test_lmeval_catalogue.py)."""
    from lmmbench.testing.hf_datasets import use_offline_cache, write_dataset_cache

    home = tmp_path_factory.mktemp("hf_trunc")
    mp = pytest.MonkeyPatch()
    use_offline_cache(mp, home)
    gsm = [{"question": f"Tom has {i} red apples and {i + 3} green apples. How many apples does Tom have?",
            "answer": f"Tom has {i} + {i + 3} = {2 * i + 3} apples.\n#### {2 * i + 3}"} for i in range(12)]  # fmt: skip
    write_dataset_cache(home, "openai/gsm8k", "main", {"train": gsm[:8], "test": gsm[8:]})
    yield home
    mp.undo()


@pytest.fixture(scope="module")
def both(hf_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import contextlib
    import io

    import torch
    from lm_eval import simple_evaluate

    from lmmbench.evaluation.lmeval.catalogue import _task_manager
    from lmmbench.models.tiny import build_tiny_model

    torch.set_num_threads(1)
    # lm-eval's side gets the index of lm-eval's catalogue the run above built (tests/eval/test_task_index_cache.py:
    # the same entries lm-eval's TaskManager builds): indexing is 15 CPU-s of the fixture, no part of the check
    out = tmp_path_factory.mktemp("trunc_run")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["eval", "--model", "tiny-llm", "--tasks", "gsm8k", "--limit", str(LIMIT), "--batch-size", "1",
                   "--threads", "1", "--max-length", str(MAX_LENGTH), "--gen_kwargs", f"max_gen_toks={MAX_GEN}",
                   "--bootstrap-iters", "0", "--out-dir", str(out)])  # fmt: skip
    ref = simple_evaluate(model="hf", model_args=f"pretrained={build_tiny_model('tiny-llm')},dtype=float32,device=cpu,"
                          f"max_length={MAX_LENGTH}", tasks=["gsm8k"], limit=LIMIT, batch_size=1,
                          gen_kwargs=f"max_gen_toks={MAX_GEN}", log_samples=True, bootstrap_iters=0,
                          task_manager=_task_manager(()))  # fmt: skip
    assert ref is not None
    return {"rc": rc, "run": next(out.glob("*/run.json")).parent, "ref": ref, "stderr": err.getvalue()}


def test_a_generation_task_longer_than_the_window_gives_lm_evals_numbers(both: dict[str, Any]) -> None:
    from lmmbench.models import load_model

    assert both["rc"] == 0
    run, ref = both["run"], both["ref"]
    theirs = {(s["doc_id"], s["filter"]): s for s in ref["samples"]["gsm8k"]}  # one row per document and filter
    mine = [json.loads(x) for x in (run / "predictions" / "gsm8k.jsonl").read_text().splitlines()]
    tok = load_model("tiny-llm").tokenizer
    assert len(mine) == len(theirs) == 2 * LIMIT
    for row in mine:
        t = theirs[(row["doc_id"], row["filter"])]
        assert row["prompt"] == t["arguments"][0][0]
        # the case under test: every prompt is longer than the window leaves for it
        assert len(tok(row["prompt"], add_special_tokens=False).input_ids) > MAX_LENGTH - MAX_GEN
        assert row["resps"] == t["resps"]  # generated from the same truncated context
    result = json.loads((run / "results" / "gsm8k.json").read_text())
    for key, value in ref["results"]["gsm8k"].items():
        base, _, flt = key.partition(",")
        if not flt or "_stderr" in base or not isinstance(value, (int, float)):
            continue
        assert result["metrics"][f"{base},{flt}"]["value"] == value, key
    assert result["truncated"] == {"generate_until": LIMIT, "loglikelihood": 0}


def test_truncation_is_counted_in_the_run_log_and_said_on_the_console(both: dict[str, Any]) -> None:
    run = json.loads((both["run"] / "run.json").read_text())
    assert run["measurement"]["truncated_requests"] == {"generate_until": LIMIT, "loglikelihood": 0}
    assert f"truncated: {LIMIT} generate_until request(s)" in both["stderr"]
    assert "left-truncated to the model's window" in (both["run"] / "logs" / "all.log").read_text()


def test_no_truncate_refuses_with_one_line(hf_home: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["eval", "--model", "tiny-llm", "--tasks", "gsm8k", "--limit", "1", "--threads", "1",
                 "--max-length", str(MAX_LENGTH), "--gen_kwargs", f"max_gen_toks={MAX_GEN}", "--no-truncate",
                 "--out-dir", str(tmp_path)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --no-truncate: a prompt of") and "exceeds the model's context of 64" in err[-1]


def test_prompt_is_refused_with_a_catalogue_task(hf_home: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["eval", "--model", "tiny-llm", "--tasks", "gsm8k", "--prompt", "qa@1", "--out-dir",
                 str(tmp_path)]) == 2  # fmt: skip
    assert "--prompt: replaces the prompt of lmmbench's own tasks" in capsys.readouterr().err


def test_log_likelihood_truncation_is_counted_per_task(tmp_path: Path) -> None:
    """sample_mc with a 16-token window: the count equals the (context, choice) inputs longer than the window,
    counted here from the predictions' prompts with the tokenizer."""
    from lmmbench.evaluation import EvalConfig, run_eval
    from lmmbench.models import load_model

    run = run_eval(EvalConfig(model="tiny-llm", tasks=["sample_mc"], limit=6, max_length=16, threads=1,
                              out_dir=tmp_path), show_progress=False)  # fmt: skip
    tok = load_model("tiny-llm").tokenizer
    expected = 0
    for line in (run.run_dir / "predictions" / "sample_mc.jsonl").read_text().splitlines():
        row = json.loads(line)
        for choice in row["choices"]:
            n = len(tok(row["prompt"] + " " + choice, add_special_tokens=False).input_ids)
            expected += n - 1 > 16
    assert expected > 0
    result = json.loads((run.run_dir / "results" / "sample_mc.json").read_text())
    assert result["truncated"] == {"generate_until": 0, "loglikelihood": expected}
