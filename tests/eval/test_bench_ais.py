"""`lmmbench bench ais`: AISBench 3.1's command line and config files against a scripted server on local
gsm8k-format data.

The config files here are written by the tests in the shapes AISBench ships (``configs/models/vllm_api/*.py``,
``configs/datasets/gsm8k/*.py``: 0- and 4-shot, string and chat prompts, the perf variant's bare ``{question}``);
the expected request bodies are written out from AISBench's ``get_request_body`` as read, the expected accuracy
from the scripted answers (which ones are right is decided here, by the rules).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.testing.scripted_server import ScriptedServer

ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3+4=7\n#### 7"},
    {"question": "A box holds 1,200 pens; 200 are sold. How many left?", "answer": "1200-200=1000\n#### 1,000"},
    {"question": "What is 6 times 7?", "answer": "6*7=42\n#### 42"},
]
#: the scripted answers: right, right (after the reasoning is cut), wrong -> accuracy 2/3
RULES = [("Tom has", None, "He has 3+4 = 7 apples."), ("1,200 pens", None, "<think>maybe 9</think>So 1000 remain."),
         ("6 times", None, "It is 41")]  # fmt: skip
SHOT_Q, SHOT_A = "Ann has 2 cats and gets 1. How many?", "2+1=3\nThe answer is 3"

#: each shipped form's prompt, in its shape (a string, or HUMAN / BOT rounds); {question} is the row's
TEMPLATES: dict[str, Any] = {
    "gsm8k_gen_0_shot_cot_str": "Question: {question}\nLet's think step by step\nAnswer:",
    "gsm8k_gen_0_shot_cot_str_perf": "{question}",
    "gsm8k_gen_4_shot_cot_str": f"Question: {SHOT_Q}\nAnswer:\n{SHOT_A}\n\nQuestion: {{question}}\nAnswer:\n",
    "gsm8k_gen_0_shot_cot_chat_prompt": [("HUMAN", "Answer this.\n\nQuestion: {question}")],
    "gsm8k_gen_4_shot_cot_chat_prompt": [("HUMAN", f"Question: {SHOT_Q}"), ("BOT", SHOT_A + "\n"),
                                         ("HUMAN", "Question: {question}")],
}  # fmt: skip


def _template_source(tpl: Any) -> str:
    """The ``template=...`` argument as AISBench's config files write it."""
    if isinstance(tpl, str):
        return f"template={tpl!r}"
    rounds = ", ".join(f"dict(role={r!r}, prompt={p!r})" for r, p in tpl)
    return f"template=dict(round=[{rounds}])"


FORMS = {name: _template_source(tpl) for name, tpl in TEMPLATES.items()}

DATASET = '''from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
from ais_bench.benchmark.datasets import GSM8KDataset, gsm8k_postprocess, gsm8k_dataset_postprocess, Gsm8kEvaluator
gsm8k_reader_cfg = dict(input_columns=['question'], output_column='answer')

gsm8k_infer_cfg = dict(
    prompt_template=dict(type=PromptTemplate, {template}),
    retriever=dict(type=ZeroRetriever),
    inferencer=dict(type=GenInferencer{stop}))

gsm8k_eval_cfg = dict(evaluator=dict(type=Gsm8kEvaluator), pred_role='BOT',
                      pred_postprocessor=dict(type=gsm8k_postprocess),
                      dataset_postprocessor=dict(type=gsm8k_dataset_postprocess))

gsm8k_datasets = [
    dict(abbr='{abbr}', type=GSM8KDataset, path='{path}', reader_cfg=gsm8k_reader_cfg,
         infer_cfg=gsm8k_infer_cfg, eval_cfg=gsm8k_eval_cfg)
]
'''

MODEL = '''from ais_bench.benchmark.models import {cls}
from ais_bench.benchmark.utils.postprocess.model_postprocessors import extract_non_reasoning_content

models = [
    dict(
        attr="service",
        type={cls},
        abbr="{abbr}",
        path="",
        model="",
        stream={stream},
        request_rate=0,
        use_timestamp=False,
        retry=2,
        api_key="",
        host_ip="127.0.0.1",
        host_port={port},
        url="",
        max_out_len=64,
        batch_size={batch},
        trust_remote_code=False,
        generation_kwargs=dict(temperature=0.01, ignore_eos=False),
        pred_postprocessor=dict(type=extract_non_reasoning_content),{extra}
    )
]
'''


def _write_configs(root: Path, port: int, batch: int = 1) -> Path:
    data = root / "data" / "gsm8k"
    data.mkdir(parents=True, exist_ok=True)
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = root / "configs"
    (cfg / "datasets" / "gsm8k").mkdir(parents=True, exist_ok=True)
    (cfg / "models" / "vllm_api").mkdir(parents=True, exist_ok=True)
    for name, template in FORMS.items():
        stop = ", stopping_criteria=['Question']" if "chat" in name else ""
        (cfg / "datasets" / "gsm8k" / f"{name}.py").write_text(
            DATASET.format(template=template, stop=stop, abbr="gsm8k", path=str(data)))
    for name, cls, stream in (("vllm_api_general", "VLLMCustomAPI", False),
                              ("vllm_api_general_stream", "VLLMCustomAPI", True),
                              ("vllm_api_general_chat", "VLLMCustomAPIChat", False),
                              ("vllm_api_stream_chat", "VLLMCustomAPIChat", True)):  # fmt: skip
        (cfg / "models" / "vllm_api" / f"{name}.py").write_text(
            MODEL.format(cls=cls, abbr=name.replace("_", "-"), stream=stream, port=port, batch=batch, extra=""))
    return cfg


def _prompt(form: str, q: str) -> Any:
    """The prompt AISBench renders for question ``q``: a string, or the chat turns as (OpenAI role, text)."""
    tpl = TEMPLATES[form]
    if isinstance(tpl, str):
        return tpl.replace("{question}", q)
    return [("user" if r == "HUMAN" else "assistant", p.replace("{question}", q)) for r, p in tpl]


def _expected_body(model: str, form: str, q: str) -> dict[str, Any]:
    """``get_request_body`` of VLLMCustomAPI / VLLMCustomAPIChat as read (key order included)."""
    prompt, chat, stream = _prompt(form, q), "chat" in model, "stream" in model
    # generation_kwargs as AISBench's reloaded config dump holds them: mmengine's Config.pretty_text writes every
    # dict sorted by key (mmengine/config/config.py _format_dict; ais_bench/benchmark/cli/config_manager.py
    # _dump_and_reload_config), so ignore_eos comes before temperature whatever the config file's order
    gen = {"ignore_eos": False, "temperature": 0.01, "max_tokens": 64, "model": "scripted"}
    if chat:
        turns = [("user", prompt)] if isinstance(prompt, str) else prompt
        body: dict[str, Any] = {"stream": stream, "messages": [{"content": c, "role": r} if not isinstance(prompt, str)
                                                               else {"role": r, "content": c} for r, c in turns]}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body | gen
    text = prompt if isinstance(prompt, str) else "\n".join(c for _, c in prompt)
    body = {"prompt": text, "stream": stream} | gen
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _run(tmp: Path, cfg: Path, *args: str) -> int:
    return main(["bench", "ais", "--config-dir", str(cfg), "--work-dir", str(tmp / "outputs"), *args])


def _only_run(tmp: Path) -> Path:
    runs = sorted((tmp / "outputs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.parametrize("model", ["vllm_api_general", "vllm_api_general_stream", "vllm_api_general_chat",
                                   "vllm_api_stream_chat"])  # fmt: skip
def test_every_gsm8k_form_sends_aisbenchs_bodies_and_scores_as_gsm8k_evaluator(tmp_path: Path, model: str) -> None:
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        for form in FORMS:
            out = tmp_path / form
            srv.requests.clear()
            assert main(["bench", "ais", "--config-dir", str(cfg), "--work-dir", str(out), "--models", model,
                         "--datasets", form, "--num-warmups", "0", "--dump-eval-details"]) == 0  # fmt: skip
            bodies = sorted((r["body"] for r in srv.requests), key=json.dumps)
            want = sorted((_expected_body(model, form, r["question"]) for r in ROWS), key=json.dumps)
            assert [json.dumps(b) for b in bodies] == [json.dumps(w) for w in want], form  # key order too
            paths = {r["path"] for r in srv.requests}
            assert paths == {"/v1/chat/completions" if "chat" in model else "/v1/completions"}
            run = next(out.iterdir())
            abbr = model.replace("_", "-")
            preds = sorted((json.loads(x) for x in (run / "predictions" / abbr / "gsm8k.jsonl").read_text()
                            .splitlines()), key=lambda p: p["id"])  # fmt: skip
            assert [p["id"] for p in preds] == [0, 1, 2] and all(p["success"] and p["data_abbr"] == "gsm8k"
                                                                 for p in preds)  # fmt: skip
            assert [p["gold"] for p in preds] == [r["answer"] for r in ROWS]
            assert preds[1]["prediction"] == "<think>maybe 9</think>So 1000 remain."
            first = _prompt(form, ROWS[0]["question"])
            want_origin = first if isinstance(first, str) else (
                [{"role": "HUMAN" if r == "user" else "BOT", "prompt": c} for r, c in first] if "chat" in model
                else "\n".join(c for _, c in first))  # fmt: skip
            assert preds[0]["origin_prompt"] == want_origin
            result = json.loads((run / "results" / abbr / "gsm8k.json").read_text())
            assert result["accuracy"] == pytest.approx(200 / 3)
            details = result["details"]
            assert [details[str(i)]["predictions"] for i in range(3)] == [["7"], ["1000"], ["41"]]
            assert [details[str(i)]["references"] for i in range(3)] == [["7"], ["1000"], ["42"]]
            assert [details[str(i)]["correct"] for i in range(3)] == [[True], [True], [False]]
            summary = next((run / "summary").glob("summary_*.csv")).read_text().splitlines()
            assert summary[0] == f"dataset,version,metric,mode,{abbr}"
            assert summary[1].startswith("gsm8k,") and summary[1].endswith(",accuracy,gen,66.67")


def test_layout_modes_reuse_and_viz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        base = ["--models", "vllm_api_general_chat", "--datasets", "gsm8k_gen_0_shot_cot_chat_prompt"]
        assert _run(tmp_path, cfg, *base, "--mode", "infer") == 0
        run = _only_run(tmp_path)
        assert len(srv.requests) == 4  # one warm-up (the first prompt again), then the three prompts
        names = {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}
        assert names == {f"configs/{run.name}_{__import__('os').getpid()}.py",
                         "logs/infer/vllm-api-general-chat/gsm8k.out",
                         "predictions/vllm-api-general-chat/gsm8k.jsonl"}  # fmt: skip
        assert _run(tmp_path, cfg, *base, "--mode", "eval") == 2  # eval needs --reuse
        assert "--reuse" in capsys.readouterr().err
        assert _run(tmp_path, cfg, *base, "--mode", "eval", "--reuse") == 0
        assert len(srv.requests) == 4  # eval sends nothing
        assert (run / "results" / "vllm-api-general-chat" / "gsm8k.json").is_file()
        summaries = sorted((run / "summary").glob("summary_*.txt"))
        assert len(summaries) == 1 and "66.67" in summaries[0].read_text()
        (run / "results" / "vllm-api-general-chat" / "gsm8k.json").write_text(json.dumps({"accuracy": 12.5}))
        import time

        time.sleep(1.1)  # a new time label for the viz summary
        assert _run(tmp_path, cfg, *base, "--mode", "viz", "--reuse", run.name) == 0
        out = capsys.readouterr().out
        assert "12.50" in out and "The markdown format results is as below" in out
        assert len(sorted((run / "summary").glob("summary_*.csv"))) == 2  # viz wrote its own, from results/


def test_num_prompts_warmups_merge_ds_and_workers_on_a_simulated_4_cpu_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr("os.cpu_count", lambda: 4)  # AISBench caps --max-num-workers at 0.8 x the CPUs (3 here)
    with ScriptedServer(RULES, default="none", delay_s=0.2) as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        two = ["--models", "vllm_api_general", "--datasets", "gsm8k_gen_0_shot_cot_str", "gsm8k_gen_4_shot_cot_str"]
        assert _run(tmp_path / "a", cfg, *two, "--num-prompts", "2", "--mode", "infer") == 0
        assert len(srv.requests) == 2 * (1 + 2)  # two tasks, each a warm-up and two prompts
        assert srv.max_in_flight == 1  # batch_size 1, one task at a time
        srv.requests.clear()
        srv.max_in_flight = 0
        assert _run(tmp_path / "b", cfg, *two, "--num-prompts", "2", "--num-warmups", "0", "--mode", "infer",
                    "--max-num-workers", "2") == 0  # fmt: skip
        assert len(srv.requests) == 4 and srv.max_in_flight == 2  # both tasks at once
        srv.requests.clear()
        assert _run(tmp_path / "c", cfg, *two, "--num-prompts", "2", "--merge-ds", "--mode", "infer") == 0
        assert len(srv.requests) == 1 + 4  # one task for both data sets (same inferencer): one warm-up


def test_debug_logs_to_the_terminal_and_dry_run_sends_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        base = ["--models", "vllm_api_general", "--datasets", "gsm8k_gen_0_shot_cot_str", "--mode", "infer"]
        assert _run(tmp_path / "d", cfg, *base, "--debug") == 0
        assert "Warmup finished" in capsys.readouterr().err
        assert not (_only_run(tmp_path / "d") / "logs").exists()
        srv.requests.clear()
        assert _run(tmp_path / "e", cfg, *base, "--dry-run") == 0
        assert srv.requests == [] and "[dry-run] vllm-api-general/gsm8k: 3 prompts" in capsys.readouterr().out
        assert sorted(p.name for p in _only_run(tmp_path / "e").iterdir()) == ["configs"]


def test_search_aisbench_root_and_relative_data_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(RULES, default="none") as srv:
        port = int(srv.url.split(":")[2].split("/")[0])
        cfg = _write_configs(tmp_path / "mine", port)
        install = tmp_path / "site"  # an installation's layout: <root>/ais_bench/benchmark/configs/...
        shipped = install / "ais_bench" / "benchmark" / "configs"
        (shipped / "datasets" / "gsm8k").mkdir(parents=True)
        (shipped / "models" / "vllm_api").mkdir(parents=True)
        data = install / "ais_bench" / "datasets" / "gsm8k"
        data.mkdir(parents=True)
        (data / "test.jsonl").write_text(json.dumps(ROWS[2]) + "\n")
        (shipped / "datasets" / "gsm8k" / "gsm8k_gen_0_shot_cot_str.py").write_text(DATASET.format(
            template=FORMS["gsm8k_gen_0_shot_cot_str"], stop="", abbr="gsm8k", path="ais_bench/datasets/gsm8k"))
        (shipped / "models" / "vllm_api" / "vllm_api_general.py").write_text(MODEL.format(
            cls="VLLMCustomAPI", abbr="shipped", stream=False, port=port, batch=1, extra=""))
        args = ["--models", "vllm_api_general", "--datasets", "gsm8k_gen_0_shot_cot_str"]
        assert _run(tmp_path, cfg, "-s", *args, "--aisbench-root", str(install)) == 0
        table = capsys.readouterr().out
        assert str(cfg / "models" / "vllm_api" / "vllm_api_general.py") in table  # --config-dir first
        empty = tmp_path / "empty"
        empty.mkdir()
        assert _run(tmp_path / "r", empty, *args, "--aisbench-root", str(install), "--mode", "infer",
                    "--num-warmups", "0") == 0  # fmt: skip
        run = _only_run(tmp_path / "r")
        assert (run / "predictions" / "shipped" / "gsm8k.jsonl").is_file()
        assert [r["texts"] for r in srv.requests] == [[f"Question: {ROWS[2]['question']}\nLet's think step by "
                                                       "step\nAnswer:"]]  # the installation's data  # fmt: skip
        assert _run(tmp_path / "r2", empty, *args) == 2
        assert "--aisbench-root" in capsys.readouterr().err


def test_config_file_and_summarizer_dataset_abbrs(tmp_path: Path) -> None:
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        main_file = tmp_path / "my_eval.py"
        main_file.write_text("from mmengine.config import read_base\n\nwith read_base():\n"
                             "    from .configs.models.vllm_api.vllm_api_general_chat import models\n"
                             "    from .configs.datasets.gsm8k.gsm8k_gen_0_shot_cot_str import gsm8k_datasets\n\n"
                             "datasets = gsm8k_datasets\n")  # fmt: skip
        assert main(["bench", "ais", str(main_file), "--work-dir", str(tmp_path / "o1"), "--num-warmups", "0"]) == 0
        assert len(srv.requests) == 3
        (cfg / "summarizers").mkdir()
        (cfg / "summarizers" / "mine.py").write_text("summarizer = dict(attr='accuracy', dataset_abbrs=['other', "
                                                     "'gsm8k'])\n")  # fmt: skip
        assert _run(tmp_path / "o2", cfg, "--models", "vllm_api_general_chat", "--datasets",
                    "gsm8k_gen_0_shot_cot_str", "--summarizer", "mine", "--num-warmups", "0") == 0  # fmt: skip
        rows = next((_only_run(tmp_path / "o2") / "summary").glob("*.csv")).read_text().splitlines()
        assert rows[1] == "other,-,-,-,-" and rows[2].startswith("gsm8k,")  # the summarizer's order


REFUSED = [
    (["--pressure"], "--pressure"),
    (["--max-workers-per-gpu", "2"], "--max-workers-per-gpu"),
    (["--custom-dataset-path", "x.jsonl"], "--custom-dataset-path"),
    (["--mode", "judge"], "--mode judge"),
    (["--dump-extract-rate"], "--dump-extract-rate acts with --dump-eval-details"),
    (["--num-prompts", "0"], "`--num-prompts` must be >= 1"),
    (["--pressure-time", "30"], "--pressure-time"),
    (["--custom-dataset-meta-path", "m.json"], "--custom-dataset-meta-path"),
    (["--custom-dataset-data-type", "qa"], "--custom-dataset-data-type"),
    (["--custom-dataset-infer-method", "gen"], "--custom-dataset-infer-method"),
]


@pytest.mark.parametrize(("extra", "message"), REFUSED)
def test_refused_flags_name_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                       message: str) -> None:  # fmt: skip
    cfg = _write_configs(tmp_path, 9)
    assert _run(tmp_path, cfg, "--models", "vllm_api_general", "--datasets", "gsm8k_gen_0_shot_cot_str", *extra) == 2
    assert message in capsys.readouterr().err


def test_unhonoured_model_field_and_computed_value_are_refused_without_running(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    cfg = _write_configs(tmp_path, 9)
    models = cfg / "models" / "vllm_api"
    (models / "with_meta.py").write_text(MODEL.format(cls="VLLMCustomAPIChat", abbr="m", stream=False, port=9, batch=1,
                                                      extra="\n        meta_template=dict(round=[]),"))  # fmt: skip
    assert _run(tmp_path, cfg, "--models", "with_meta", "--datasets", "gsm8k_gen_0_shot_cot_str") == 2
    assert "model field meta_template is not honoured" in capsys.readouterr().err
    marker = tmp_path / "ran"
    (models / "computed.py").write_text(f"import os\nopen({str(marker)!r}, 'w')\nmodels = []\n")
    assert _run(tmp_path, cfg, "--models", "computed", "--datasets", "gsm8k_gen_0_shot_cot_str") == 2
    err = capsys.readouterr().err
    assert f"{models / 'computed.py'}:1:" in err and "Import" in err and not marker.exists()
    (models / "summed.py").write_text("base = dict(abbr='x')\nmodels = [base] * 2\n")
    assert _run(tmp_path, cfg, "--models", "summed", "--datasets", "gsm8k_gen_0_shot_cot_str") == 2
    assert f"{models / 'summed.py'}:2: a computed value (BinOp" in capsys.readouterr().err
    other = cfg / "datasets" / "mmlu.py"
    other.write_text("from ais_bench.benchmark.datasets import MMLUDataset\nmmlu_datasets = [dict(abbr='mmlu', "
                     "type=MMLUDataset)]\n")  # fmt: skip
    assert _run(tmp_path, cfg, "--models", "vllm_api_general", "--datasets", "mmlu") == 2
    assert "data set type MMLUDataset is not supported" in capsys.readouterr().err


def test_bad_data_and_a_damaged_prediction_file_are_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        base = ["--models", "vllm_api_general", "--datasets", "gsm8k_gen_0_shot_cot_str", "--num-warmups", "0"]
        assert _run(tmp_path, cfg, *base, "--mode", "infer") == 0
        pred = _only_run(tmp_path) / "predictions" / "vllm-api-general" / "gsm8k.jsonl"
        pred.write_text(pred.read_text() + "{broken\n")
        assert _run(tmp_path, cfg, *base, "--mode", "eval", "--reuse") == 2
        assert f"{pred}:4: not JSON" in capsys.readouterr().err
        data = tmp_path / "data" / "gsm8k" / "test.jsonl"
        data.write_text(json.dumps({"question": "q", "answer": "no marker"}) + "\n")
        pred.write_text("")
        assert _run(tmp_path, cfg, *base, "--mode", "eval", "--reuse") == 2
        assert "the answer has no '#### '" in capsys.readouterr().err


def test_infer_with_reuse_sends_only_the_prompts_not_yet_predicted(tmp_path: Path) -> None:
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        base = ["--models", "vllm_api_general", "--datasets", "gsm8k_gen_0_shot_cot_str", "--num-warmups", "0"]
        assert _run(tmp_path, cfg, *base, "--mode", "infer", "--num-prompts", "2") == 0
        assert _run(tmp_path, cfg, *base, "--reuse") == 0
        assert [r["texts"][0].split("\n")[0] for r in srv.requests] == [f"Question: {r['question']}" for r in ROWS]
        run = _only_run(tmp_path)
        assert json.loads((run / "results" / "vllm-api-general" / "gsm8k.json").read_text())["accuracy"] == \
            pytest.approx(200 / 3)  # fmt: skip


def test_a_demo_config_adjusting_an_inherited_data_set_is_read(tmp_path: Path) -> None:
    """AISBench's demo configs (configs/datasets/demo/) inherit a gsm8k config and change its abbr and test_range
    with item assignments; read statically, as the rest."""
    with ScriptedServer(RULES, default="none") as srv:
        cfg = _write_configs(tmp_path, int(srv.url.split(":")[2].split("/")[0]))
        (cfg / "datasets" / "demo").mkdir()
        (cfg / "datasets" / "demo" / "demo_gsm8k_gen_0_shot_cot_str.py").write_text(
            "from mmengine import read_base\n\nwith read_base():\n"
            "    from ..gsm8k.gsm8k_gen_0_shot_cot_str import gsm8k_datasets\n\n"
            "gsm8k_datasets[0]['abbr'] = 'demo_' + gsm8k_datasets[0]['abbr']\n"
            "gsm8k_datasets[0]['reader_cfg']['test_range'] = '[0:2]'\n")  # fmt: skip
        assert _run(tmp_path, cfg, "--models", "vllm_api_general", "--datasets", "demo_gsm8k_gen_0_shot_cot_str",
                    "--num-warmups", "0") == 0  # fmt: skip
        run = _only_run(tmp_path)
        assert len(srv.requests) == 2
        result = json.loads((run / "results" / "vllm-api-general" / "demo_gsm8k.json").read_text())
        assert result == {"accuracy": 100.0}  # the first two scripted answers are right
