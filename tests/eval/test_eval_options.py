"""eval's generation and prompt options act on every task kind that generates, seen in what the server received or
in the predictions files; where no task of the run can take one, it is refused (exit 2, one line naming it).

The server: a real HTTP server on 127.0.0.1 serving the real tiny-llm (tests/eval/logprob_server.py), recording
each POST body; for lmms-eval's multimodal benchmarks, the scripted chat server of ``lmmbench.testing``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.evaluation import EvalConfig, run_eval

from .logprob_server import serve

TASK_FILE = str(Path(__file__).parent / "lmeval_tasks" / "lmm_gen.yaml")
OPTIONS = {"gen_kwargs": "max_gen_toks=3,until=ZZ,temperature=0.5,top_p=0.9", "seed": "5",
           "system_instruction": "Answer briefly."}  # fmt: skip


def _endpoint_run(loaded: Any, port: int, out: Path, **cfg: Any) -> tuple[list[dict[str, Any]], Path]:
    """Run eval against the recording server; (generation request bodies, run folder)."""
    received: list[dict[str, Any]] = []
    with serve(loaded, port, received=received) as url:
        run = run_eval(EvalConfig.model_validate({"model": url, "tokenizer": "tiny-llm", "max_length": 32768,
                                                  "limit": 2, "threads": 1, "out_dir": out, **cfg}), False)
    gens = [r for r in received if not r["body"].get("echo")]  # log-likelihood requests echo the prompt
    return gens, run.run_dir


def _predictions(run_dir: Path, task: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "predictions" / f"{task}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("task", "name", "own_max"), [("sample_qa", "sample_qa", 8), (TASK_FILE, "lmm_gen", 8)])
def test_gen_kwargs_system_instruction_and_seed_reach_the_server_on_own_tasks_and_task_files(
    tiny_llm: Any, port: int, tmp_path: Path, task: str, name: str, own_max: int
) -> None:
    plain, plain_dir = _endpoint_run(tiny_llm, port, tmp_path / "plain", tasks=[task])
    given, given_dir = _endpoint_run(tiny_llm, port, tmp_path / "given", tasks=[task], **OPTIONS)
    assert len(plain) == len(given) == 2
    for body in (r["body"] for r in plain):
        assert body["max_tokens"] == own_max and body["temperature"] == 0.0 and "seed" not in body
        assert not body["prompt"].startswith("Answer briefly.")
    seeds = set()
    for r in given:
        body = r["body"]
        assert r["path"] == "/v1/completions"
        assert body["max_tokens"] == 3 and body["stop"] == ["ZZ"]
        assert body["temperature"] == 0.5 and body["top_p"] == 0.9
        assert body["prompt"].startswith("Answer briefly.")  # lm-eval: the instruction, then the description
        seeds.add(body["seed"])
    assert len(seeds) == 2  # one sampling seed per sample, from --seed
    assert all(p["prompt"].startswith("Answer briefly.") for p in _predictions(given_dir, name))
    assert not any(p["prompt"].startswith("Answer briefly.") for p in _predictions(plain_dir, name))


def test_the_seed_draws_the_few_shot_examples_of_own_tasks(tiny_llm: Any, port: int, tmp_path: Path) -> None:
    prompts = {}
    for seed in ("1", "2", "1"):
        _, run_dir = _endpoint_run(tiny_llm, port, tmp_path / f"s{seed}_{len(prompts)}", tasks=["sample_qa"],
                                   num_fewshot=3, seed=seed)  # fmt: skip
        prompts.setdefault(seed, []).append([p["prompt"] for p in _predictions(run_dir, "sample_qa")])
    assert prompts["1"][0] == prompts["1"][1]  # the same seed, the same examples
    assert prompts["1"][0] != prompts["2"][0]


@pytest.mark.parametrize("multiturn", [False, True])
def test_chat_template_and_fewshot_as_multiturn_reach_the_server(tiny_llm: Any, port: int, tmp_path: Path,
                                                                 multiturn: bool) -> None:  # fmt: skip
    gens, _ = _endpoint_run(tiny_llm, port, tmp_path, tasks=["sample_qa"], num_fewshot=2, apply_chat_template=True,
                            fewshot_as_multiturn=multiturn, system_instruction="Be terse.")  # fmt: skip
    assert gens and all(r["path"] == "/v1/chat/completions" for r in gens)
    for r in gens:
        messages = r["body"]["messages"]
        assert messages[0] == {"role": "system", "content": "Be terse."}
        roles = [m["role"] for m in messages[1:]]
        assert roles == (["user", "assistant", "user", "assistant", "user"] if multiturn else ["user"])


def test_max_gen_toks_cuts_the_outputs_of_an_own_task_in_process(tmp_path: Path) -> None:
    """The issue's case: --gen_kwargs max_gen_toks=1 on sample_qa; greedy outputs are prefixes of the longer ones."""
    runs = {}
    for name, extra in (("short", {"gen_kwargs": "max_gen_toks=1"}), ("long", {})):
        run = run_eval(EvalConfig.model_validate({"model": "tiny-llm", "tasks": ["sample_qa"], "limit": 4,
                                                  "threads": 1, "out_dir": tmp_path / name, **extra}), False)
        runs[name] = [p["output"] for p in _predictions(run.run_dir, "sample_qa")]
    from lmmbench.models import load_model

    tok = load_model("tiny-llm").tokenizer
    for short, long in zip(runs["short"], runs["long"], strict=True):
        assert long.startswith(short)
        assert len(tok(short, add_special_tokens=False).input_ids) <= 2  # one token (re-encoding may split it)
    assert sum(len(s) for s in runs["short"]) < sum(len(s) for s in runs["long"])


def test_a_sampling_seed_reproduces_and_another_changes_in_process_outputs(tmp_path: Path) -> None:
    outs = []
    for i, seed in enumerate(("11", "11", "12")):
        run = run_eval(EvalConfig.model_validate({"model": "tiny-llm", "tasks": ["sample_qa"], "limit": 4,
                                                  "threads": 1, "out_dir": tmp_path / str(i), "seed": seed,
                                                  "gen_kwargs": "temperature=1.5"}), False)  # fmt: skip
        outs.append([p["output"] for p in _predictions(run.run_dir, "sample_qa")])
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]


def test_lmms_benchmarks_take_gen_kwargs_system_instruction_and_seed(tmp_path: Path) -> None:
    from lmmbench.testing import mm_datasets
    from lmmbench.testing.scripted_server import ScriptedServer

    from .test_mm_benchmarks import _offline

    hf = tmp_path / "hf"
    with pytest.MonkeyPatch.context() as mp:
        _offline(mp, hf)
        mm_datasets.write_all(hf, ["chartqa"])
        bodies = {}
        for name, extra in (("plain", []), ("given", ["--gen_kwargs", OPTIONS["gen_kwargs"], "--seed", "5",
                                                      "--system_instruction", "Answer briefly."])):
            with ScriptedServer(mm_datasets.rules(), default="zzz") as srv:
                assert main(["eval", "--model", srv.url.removesuffix("/v1"), "--tokenizer", "tiny-vl", "--tasks",
                             "chartqa", "--limit", "2", "--out-dir", str(tmp_path / name), *extra]) == 0
                bodies[name] = list(srv.requests)
    assert all(r["max_tokens"] != 3 and r["roles"] == ["user"] and r["seed"] is None for r in bodies["plain"])
    assert len(bodies["given"]) == 2
    for r in bodies["given"]:
        assert r["max_tokens"] == 3 and r["stop"] == ["ZZ"] and r["temperature"] == 0.5 and r["top_p"] == 0.9
        assert r["roles"] == ["system", "user"] and r["texts"][0] == "Answer briefly." and r["seed"] is not None


REFUSED = [
    (["--tasks", "sample_mc", "--gen_kwargs", "max_gen_toks=1"], "--gen_kwargs: no task of this run generates"),
    (["--tasks", "sample_qa", "--gen_kwargs", "max_gen_toks"], "--gen_kwargs max_gen_toks: no value"),
    (["--tasks", "sample_qa", "--gen_kwargs", "temperature=nan"], "--gen_kwargs temperature=nan: a finite number"),
    (["--tasks", "sample_qa", "--gen_kwargs", "num_beams=4"], "--gen_kwargs num_beams: not a generation setting"),
    (["--tasks", "sample_qa", "--gen_kwargs", "top_p=0.5"], "--gen_kwargs top_p / top_k: act only when sampling"),
    (["--tasks", "sample_ppl", "--apply_chat_template"], "--apply_chat_template: no task of this run takes"),
    (["--tasks", "sample_ppl", "--system_instruction", "x"], "--system_instruction: rolling-perplexity"),
    (["--tasks", "sample_qa", "--fewshot_as_multiturn"], "--fewshot_as_multiturn: acts only with"),
    (["--tasks", "sample_qa", "--apply_chat_template", "--fewshot_as_multiturn"],
     "--fewshot_as_multiturn: no task of this run has few-shot"),
    (["--tasks", "sample_qa", "--seed", "3"], "--seed: nothing of this run is random"),
    (["--tasks", "chartqa", "--prompt", "qa@1"], "--prompt: replaces the prompt of lmmbench's own tasks"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a[2:]) for a, _ in REFUSED])
def test_options_that_cannot_act_are_refused_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], message: str) -> None:  # fmt: skip
    assert main(["eval", "--model", "tiny-llm", *args, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir())  # refused before a run folder or a model


def test_served_model_names_the_model_in_every_request(tiny_llm: Any, port: int, tmp_path: Path) -> None:
    from lmmbench.core.errors import UserError

    received: list[dict[str, Any]] = []
    common = {"tokenizer": "tiny-llm", "max_length": 32768, "limit": 2, "tasks": ["sample_qa"]}
    with serve(tiny_llm, port, name="srv-a", received=received) as url:
        run_eval(EvalConfig.model_validate({**common, "model": url, "served_model": "srv-a",
                                            "out_dir": tmp_path / "a"}), False)  # fmt: skip
        with pytest.raises(UserError, match="model 'other-name' is not served"):
            run_eval(EvalConfig.model_validate({**common, "model": url, "served_model": "other-name",
                                                "out_dir": tmp_path / "b"}), False)  # fmt: skip
    assert received and {r["body"]["model"] for r in received} == {"srv-a"}


def test_dtype_changes_the_log_likelihoods_written(tmp_path: Path) -> None:
    lls = {}
    for dtype in ("float32", "bfloat16"):
        run = run_eval(EvalConfig.model_validate({"model": "tiny-llm", "tasks": ["sample_mc"], "limit": 2,
                                                  "threads": 1, "dtype": dtype, "out_dir": tmp_path / dtype}), False)
        lls[dtype] = [p["loglikelihoods"] for p in _predictions(run.run_dir, "sample_mc")]
    assert lls["float32"] != lls["bfloat16"]


def test_a_config_file_sets_the_options(tmp_path: Path) -> None:
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("model: tiny-llm\ntasks: [sample_qa]\nlimit: 2\nsystem_instruction: 'From a file.'\n")
    assert main(["eval", "--config", str(cfg), "--threads", "1", "--out-dir", str(tmp_path / "out")]) == 0
    run_dir = next((tmp_path / "out").glob("*/predictions")).parent
    assert all(p["prompt"].startswith("From a file.") for p in _predictions(run_dir, "sample_qa"))
