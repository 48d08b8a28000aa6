"""lm-eval's gsm8k by name through lmmbench's endpoint client, against lm-eval's own `local-completions` and
`local-chat-completions` on the same scripted OpenAI-compatible server (a real HTTP server on 127.0.0.1).

Random-weight models score zero on generation tasks, so the server is scripted: it reads the last question of
the prompt and answers the gold answer for every other question of the test split (a known subset), and a
wrong number for the rest. Both tools must get the same non-trivial accuracy (exact_match 0.5 here) on
both the completions and the chat-completions routes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.core.net import free_loopback_port

from .logprob_server import serve_app

ROWS = [{"question": f"How many apples are {i} apples and {i + 3} apples?",
         "answer": f"{i} + {i + 3} = {2 * i + 3}.\n#### {2 * i + 3}"} for i in range(12)]  # fmt: skip
TRAIN, TEST = ROWS[:8], ROWS[8:]
GOLD = {r["question"]: r["answer"] for r in ROWS}
RIGHT = {r["question"] for r in TEST[::2]}  # the known subset answered right: exact_match 0.5


def _answer(prompt: str) -> str:
    question = prompt.rsplit("Question:", 1)[-1].split("\nAnswer:", 1)[0].strip()
    if question in RIGHT:
        return " " + GOLD[question]
    return " I think it is 1000.\n#### 1000"


@pytest.fixture(scope="module")
def scripted_server() -> Iterator[str]:
    from aiohttp import web

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        text = _answer(str(body["prompt"]))
        return web.json_response({"object": "text_completion", "model": "scripted",
                                  "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})  # fmt: skip

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        text = _answer(str(body["messages"][-1]["content"])).strip()
        return web.json_response({"object": "chat.completion", "model": "scripted", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})  # fmt: skip

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    with serve_app(app, free_loopback_port()) as url:
        yield f"{url}/v1"


@pytest.fixture(scope="module")
def gsm8k_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from lmmbench.testing.hf_datasets import write_dataset_cache

    home = tmp_path_factory.mktemp("hf_gsm8k")
    mp = pytest.MonkeyPatch()
    for var, value in (("HF_HOME", str(home)), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_OFFLINE", "1")):
        mp.setenv(var, value)
    mp.delenv("HF_DATASETS_CACHE", raising=False)
    import datasets

    # `datasets` reads HF_HOME once, at import: another module's cache would be read otherwise
    mp.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    write_dataset_cache(home, "openai/gsm8k", "main", {"train": TRAIN, "test": TEST})
    yield home
    mp.undo()


@pytest.fixture(scope="module")
def lm_eval_tasks() -> Any:
    """lm-eval's task index: the one lmmbench's own run builds (and caches for the process), handed to lm-eval's
    ``simple_evaluate`` too. Indexing its ~13,000 task files is most of a call's cost (270 s at load 17 on a
    2-core EPYC); the index only lists the files, each run still loads its tasks afresh. Without model metadata,
    which gsm8k does not read."""
    from lmmbench.evaluation.lmeval.catalogue import _task_manager

    return _task_manager(())


def _lm_eval(url: str, chat: bool, tasks: Any) -> dict[str, Any]:
    from lm_eval import simple_evaluate

    from lmmbench.models.tiny import build_tiny_model

    model = "local-chat-completions" if chat else "local-completions"
    route = "chat/completions" if chat else "completions"
    args = (f"model=scripted,base_url={url}/{route},tokenizer={build_tiny_model('tiny-llm')},"
            "tokenizer_backend=huggingface,tokenized_requests=False,num_concurrent=1,max_retries=1")  # fmt: skip
    out = simple_evaluate(model=model, model_args=args, tasks=["gsm8k"], apply_chat_template=chat,
                          gen_kwargs="max_gen_toks=32", bootstrap_iters=0, task_manager=tasks)  # fmt: skip
    assert out is not None
    return dict(out["results"]["gsm8k"])


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat-completions"])
def test_endpoint_path_gives_lm_evals_accuracy_on_a_scripted_server(
    scripted_server: str, gsm8k_cache: Path, lm_eval_tasks: Any, tmp_path: Path, chat: bool
) -> None:
    from lmmbench.evaluation import EvalConfig, run_eval

    run = run_eval(EvalConfig(model=scripted_server, tokenizer="tiny-llm", tasks=["gsm8k"], out_dir=tmp_path,
                              apply_chat_template=chat, gen_kwargs="max_gen_toks=32", bootstrap_iters=0),
                   show_progress=False)  # fmt: skip
    ours = {r["task"]: r for r in run.results}["gsm8k"]["metrics"]
    theirs = _lm_eval(scripted_server, chat, lm_eval_tasks)
    for flt in ("strict-match", "flexible-extract"):
        assert ours[f"exact_match,{flt}"]["value"] == theirs[f"exact_match,{flt}"] == 0.5, (flt, ours, theirs)
    preds = [json.loads(x) for x in (run.run_dir / "predictions" / "gsm8k.jsonl").read_text().splitlines()]
    assert len(preds) == 2 * len(TEST)  # one row per document and filter
    assert all(re.search(r"#### \d+", p["resps"][0][0]) for p in preds)
