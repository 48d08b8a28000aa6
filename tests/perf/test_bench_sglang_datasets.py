"""`lmmbench bench sglang` with SGLang 0.5.23's own data sets and loader flags: each flag's effect on the requests
sent (their count, text, token ids, images, per-request fields, turn structure, send times), read from the request
bodies lmmbench's client encodes and, end to end, from what a server received.

The expected values come from the data files the tests write and from SGLang's rules as its loaders state them
(`sglang/benchmark/datasets/*.py`), counted here independently: the tokenizer is word-level, so a prompt's tokens
are its whitespace words. Hub data sets (LongBench-v2, MMMU) are written into a `datasets` cache and read offline.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lmmbench.backends.openai_http import OpenAIHttpClient
from lmmbench.cli.main import main
from lmmbench.config.dropins.sglang_serving import build_parser, translate
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.errors import UserError
from lmmbench.core.net import free_loopback_port
from lmmbench.datasets.sglang import datasets as sglang_datasets
from lmmbench.datasets.sglang.rows import SglTokenizer
from lmmbench.sessions.dropins.sglang_datasets import draw_rows, draw_sglang_requests
from lmmbench.testing import build_word_tokenizer, running_testserver
from lmmbench.testing.testserver import WORDS

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% else %}"
            "<|image_pad|> {% endif %}{% endfor %}{% endif %} {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")  # fmt: skip


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer with a chat template (role markers and an image placeholder are words of it)."""
    out = build_word_tokenizer(tmp_path_factory.mktemp("tok"), ["<|user|>", "<|assistant|>", "<|system|>",
                                                                 "<|image_pad|>", "Assistant:"])  # fmt: skip
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return out


def _draw(tok: Path, *args: str, sharegpt: Path | None = None) -> tuple[Any, list[Any], list[dict[str, Any]]]:
    """The config, requests and encoded bodies of a bench_serving command line (SGLang's flags)."""
    ns = build_parser().parse_args(["--port", "1", "--tokenizer", str(tok), *args])

    def hub() -> Path:
        assert sharegpt is not None
        return sharegpt

    cfg, reqs = draw_sglang_requests(ns, translate(ns), hub)
    client = OpenAIHttpClient(cfg.url, "m", extra_body=cfg.extra_body)
    return cfg, reqs, [client.body(r) for r in reqs]


def _words(n: int, start: int = 0) -> str:
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


def _text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else next(p["text"] for p in content if p["type"] == "text")


# ---- the same rows as SGLang's own loaders ---------------------------------------------------------------------

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_loaders.json"
#: cases where lmmbench leaves a prompt uncounted (docs/perf.md, "Coming from SGLang": the server's usage counts)
UNCOUNTED = ("gsp_turns", "gsp_fast", "image_png", "image_random", "image_blank")


def test_loaders_draw_what_sglangs_own_draw(tmp_path: Path) -> None:
    """Every case of benchmarks/sglang_loader_fixtures.py: the rows SGLang 0.5.23's loaders drew (prompt, lengths,
    images' SHA-256, a row's own fields), drawn again by lmmbench's loaders from the same files and command line
    (the --apply-chat-template cases on a tokenizer that puts a BOS token first, as SGLang's loader saw it)."""
    import hashlib

    fixture = json.loads(FIXTURE.read_text())
    for name, text in fixture["files"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    tok_dir = build_word_tokenizer(tmp_path / "tok", fixture["extra_words"])
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"chat_template": fixture["template"]}))
    bos_dir = build_word_tokenizer(tmp_path / "tok_bos", fixture["extra_words"], bos=fixture["bos"])
    (bos_dir / "tokenizer_config.json").write_text(json.dumps({"chat_template": fixture["bos_template"],
                                                               "bos_token": fixture["bos"]}))  # fmt: skip
    toks = {"": SglTokenizer(tok_dir), "bos": SglTokenizer(bos_dir)}
    for case, spec in fixture["cases"].items():
        ns = build_parser().parse_args([a.replace("{dir}", str(tmp_path)) for a in spec["argv"]])
        rows = draw_rows(ns, toks[spec.get("tokenizer", "")], lambda: tmp_path / "sg.json")
        got = [{"prompt": r.prompt, "prompt_len": r.prompt_len, "output_len": r.output_len,
                "images": [hashlib.sha256(u.encode()).hexdigest() for u in r.image_data or []],
                "extra": r.extra_body} for r in rows]  # fmt: skip
        want = spec["rows"]
        if case in UNCOUNTED:
            assert all(g["prompt_len"] is None for g in got), case
            want = [{**w, "prompt_len": None} for w in want]
        assert want and got == want, case


# ---- sharegpt / custom: --prompt-suffix, --sharegpt-context-len ------------------------------------------------


@pytest.fixture
def sharegpt(tmp_path: Path) -> Path:
    """Ten conversations: prompt i has i + 2 words (the even ones end in "Assistant:"), reply 6 words."""
    ends = [" Assistant:" if i % 2 == 0 else " " + WORDS[i] for i in range(10)]
    rows = [{"conversations": [{"from": "human", "value": _words(i + 1, i) + ends[i]},
                               {"from": "gpt", "value": _words(6, 3)}]} for i in range(10)]  # fmt: skip
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows))
    return path


def test_prompt_suffix_goes_before_the_assistant_marker(tok: Path, sharegpt: Path) -> None:
    _, reqs, bodies = _draw(tok, "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--num-prompts",
                            "10", "--backend", "sglang-oai", "--prompt-suffix", " Be brief.")  # fmt: skip
    originals = {c["conversations"][0]["value"] for c in json.loads(sharegpt.read_text())}
    assert len(bodies) == 10
    for body, req in zip(bodies, reqs, strict=True):
        prompt = body["prompt"]
        assert prompt.endswith(" Be brief.Assistant:")
        original = prompt.removesuffix(" Be brief.Assistant:")
        assert original in originals or original + "Assistant:" in originals  # its own "Assistant:" taken off
        assert req.input_tokens == len(prompt.split())  # word tokenizer: tokens are words
        assert body["max_tokens"] == 6  # the reply's length


def test_sharegpt_context_len_drops_longer_pairs(tok: Path, sharegpt: Path) -> None:
    base = ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--num-prompts", "10",
            "--backend", "sglang-oai", "--prompt-suffix", "x"]  # fmt: skip
    _, long_reqs, _ = _draw(tok, *base)
    _, reqs, bodies = _draw(tok, *base, "--sharegpt-context-len", "14")
    assert max(r.input_tokens + 6 for r in long_reqs) > 14
    expected = sum(1 for r in long_reqs if r.input_tokens + 6 <= 14)
    assert 0 < len(reqs) == expected < 10
    assert all(len(b["prompt"].split()) + b["max_tokens"] <= 14 for b in bodies)


# ---- --apply-chat-template ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bos_tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The word-level tokenizer with a BOS token "<s>" put before every encoded text (as Llama's tokenizers do) and
    a chat template that starts with it."""
    out = build_word_tokenizer(tmp_path_factory.mktemp("bos_tok"), ["<|user|>", "<|assistant|>", "Assistant:"],
                               bos="<s>")  # fmt: skip
    (out / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ bos_token }}" + TEMPLATE,
                                                           "bos_token": "<s>"}))  # fmt: skip
    return out


def test_apply_chat_template_reaches_the_server_rendered_without_bos(
    bos_tok: Path, sharegpt: Path, recorder: _Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a chat server received: each ShareGPT prompt (its --prompt-suffix before "Assistant:") as the one user
    message of the template, with the generation prompt, the template's leading BOS taken out; counted with the
    BOS the tokenizer puts first (one more token than the words; the reply's length too)."""
    monkeypatch.chdir(tmp_path)
    originals = {c["conversations"][0]["value"] for c in json.loads(sharegpt.read_text())}
    argv = ["bench", "sglang", "--backend", "sglang-oai-chat", "--port", str(recorder.port), "--tokenizer",
            str(bos_tok), "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--num-prompts", "5",
            "--apply-chat-template", "--prompt-suffix", " ok", "--warmup-requests", "0", "--output-file",
            str(tmp_path / "o.jsonl"), "--disable-tqdm"]  # fmt: skip
    assert main(argv) == 0
    sent = [b["messages"] for b in recorder.bodies if b.get("max_tokens") == 7]  # 6 words + BOS, as SGLang counts
    assert len(sent) == 5
    for messages in sent:
        assert len(messages) == 1 and messages[0]["role"] == "user"
        text = messages[0]["content"]
        assert text.startswith("<|user|> ") and text.endswith(" ok" + "Assistant: <|assistant|>")
        assert "<s>" not in text  # the template's BOS, taken out as SGLang takes it out
        inner = text.removeprefix("<|user|> ").removesuffix(" okAssistant: <|assistant|>")
        assert inner in originals or inner + "Assistant:" in originals  # its own "Assistant:" taken off
    _, reqs, bodies = _draw(bos_tok, "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--backend",
                            "sglang", "--num-prompts", "5", "--apply-chat-template")  # fmt: skip
    assert all(b["text"].startswith("<|user|> ") and "<s>" not in b["text"] for b in bodies)  # native API: text
    assert [r.input_tokens for r in reqs] == [len(b["text"].split()) + 1 for b in bodies]  # + the encoded BOS
    assert all(b["sampling_params"]["max_new_tokens"] == 7 for b in bodies)


def test_apply_chat_template_changes_nothing_where_sglangs_loader_ignores_it(tok: Path, tmp_path: Path) -> None:
    """SGLang 0.5.23 reads the flag only in its sharegpt / custom loaders: random (lmmbench's synthetic prompts)
    and generated-shared-prefix (SGLang's loader) send the same requests with it; a tokenizer without a chat
    template is refused with one line on sharegpt."""
    for args in (["--dataset-name", "random", "--num-prompts", "4", "--random-input-len", "9",
                  "--random-output-len", "3"], [*GSP, "--gsp-ordered"]):  # fmt: skip
        ns, ns_chat = (build_parser().parse_args(["--port", "1", "--backend", "sglang-oai", *args, *more])
                       for more in ([], ["--apply-chat-template"]))  # fmt: skip
        assert {**translate(ns_chat), "labels": None} == {**translate(ns), "labels": None}
    _, _, bodies = _draw(tok, *GSP, "--backend", "sglang-oai", "--gsp-ordered")
    _, _, chat_bodies = _draw(tok, *GSP, "--backend", "sglang-oai", "--gsp-ordered", "--apply-chat-template")
    assert chat_bodies == bodies and not any("<|user|>" in b["prompt"] for b in bodies)
    plain = build_word_tokenizer(tmp_path / "plain")
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"value": "alpha bravo"}, {"value": "charlie delta"}]}]))
    with pytest.raises(UserError, match=r"--apply-chat-template: the tokenizer .* has no chat template"):
        _draw(plain, "--dataset-name", "sharegpt", "--dataset-path", str(path), "--apply-chat-template")


def test_chat_template_renders_as_transformers_does(tmp_path: Path) -> None:
    """SglTokenizer's rendering and bos_token against transformers' apply_chat_template (add_generation_prompt,
    not tokenized) on tiny-llm's tokenizer (ChatML, a default system message, no BOS) and on a Llama-3-style one
    whose template starts with its BOS token."""
    from transformers import AutoTokenizer

    from lmmbench.models.shape_tokenizer import LLAMA3_TEMPLATE, build_shape_tokenizer
    from lmmbench.models.tokenizer_build import build_tokenizer

    build_tokenizer(tmp_path / "tiny-llm")
    specials = {1024: "<|begin_of_text|>", 1025: "<|start_header_id|>", 1026: "<|end_header_id|>", 1027: "<|eot_id|>"}
    build_shape_tokenizer(tmp_path / "llama3", specials, {}, "<|eot_id|>", "<|eot_id|>", LLAMA3_TEMPLATE,
                          bos="<|begin_of_text|>")  # fmt: skip
    messages = [{"role": "user", "content": "How many cats? Assistant:"}]
    for name, bos in (("tiny-llm", None), ("llama3", "<|begin_of_text|>")):
        hf, ours = AutoTokenizer.from_pretrained(str(tmp_path / name)), SglTokenizer(tmp_path / name)
        want = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert ours.apply_chat_template(messages) == want and "How many cats? Assistant:" in want
        assert ours.bos_token == hf.bos_token == bos
        assert ours.encode(want) == hf.encode(want)


# ---- random / random-ids / generated-shared-prefix: --tokenize-prompt and --gsp-* -------------------------------


def test_tokenize_prompt_sends_token_ids_on_sglangs_native_api(tok: Path, sharegpt: Path) -> None:
    args = ["--backend", "sglang", "--num-prompts", "6", "--random-input-len", "12", "--random-output-len", "5",
            "--random-range-ratio", "0.5", "--tokenize-prompt"]  # fmt: skip
    _, _, bodies = _draw(tok, "--dataset-name", "random-ids", *args)
    for body in bodies:
        ids = body["input_ids"]
        assert "text" not in body and all(isinstance(i, int) for i in ids)
        assert 6 <= len(ids) <= 12 and 2 <= body["sampling_params"]["max_new_tokens"] <= 5
        assert all(b - a == 1 for a, b in itertools.pairwise(ids) if b)  # consecutive ids (mod vocab)
    _, _, from_sharegpt = _draw(tok, "--dataset-name", "random", *args, sharegpt=sharegpt)
    vocab = json.loads((tok / "tokenizer.json").read_text())["model"]["vocab"]
    sharegpt_ids = {vocab[w] for c in json.loads(sharegpt.read_text()) for w in c["conversations"][0]["value"].split()}
    assert all(set(b["input_ids"]) <= sharegpt_ids for b in from_sharegpt)  # ShareGPT's tokens, repeated or cut
    with pytest.raises(UserError, match="only with --backend sglang"):
        _draw(tok, "--dataset-name", "random-ids", *args[2:], "--backend", "sglang-oai")


GSP = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "3", "--gsp-prompts-per-group", "4",
       "--gsp-system-prompt-len", "8", "--gsp-question-len", "4", "--gsp-output-len", "5"]  # fmt: skip


def test_gsp_ordered_keeps_groups_in_order_and_shares_each_prefix(tok: Path) -> None:
    _, reqs, bodies = _draw(tok, *GSP, "--backend", "sglang-oai", "--gsp-ordered")
    groups = [r.labels["prefix_group"] for r in reqs]
    assert groups == [0] * 4 + [1] * 4 + [2] * 4
    prefixes = [b["prompt"].split("\n\n")[0] for b in bodies]
    assert len(set(prefixes)) == 3 and all(prefixes[i] == prefixes[4 * (i // 4)] for i in range(12))
    assert all(len(p.split()) == 8 and len(b["prompt"].split("\n\n")[1].split()) == 4
               for p, b in zip(prefixes, bodies, strict=True))  # fmt: skip
    assert all(r.input_tokens == 12 and b["max_tokens"] == 5 for r, b in zip(reqs, bodies, strict=True))
    _, shuffled, _ = _draw(tok, *GSP, "--backend", "sglang-oai")
    assert sorted(r.labels["prefix_group"] for r in shuffled) == groups != [r.labels["prefix_group"] for r in shuffled]


def test_gsp_range_ratio_zipf_and_fast_prepare(tok: Path) -> None:
    _, _, bodies = _draw(tok, *GSP, "--backend", "sglang-oai", "--gsp-range-ratio", "0.2")
    outs = {b["max_tokens"] for b in bodies}
    assert outs <= {1, 2, 3, 4, 5} and len(outs) > 1  # uniform in [max(int(5 * 0.2), 1), 5]
    _, zipf, _ = _draw(tok, *GSP[:2], "--gsp-num-groups", "4", "--gsp-prompts-per-group", "50", *GSP[6:],
                       "--backend", "sglang-oai", "--gsp-group-distribution", "zipf", "--gsp-zipf-alpha", "2")
    counts = [sum(r.labels["prefix_group"] == g for r in zipf) for g in range(4)]
    assert sum(counts) == 200 and counts[0] > counts[1] > counts[3]  # p(rank) ~ 1 / rank^2
    _, fast, _ = _draw(tok, *GSP, "--backend", "sglang-oai", "--gsp-fast-prepare")
    assert all(r.input_tokens is None for r in fast)  # not counted: the server's usage counts it
    with pytest.raises(UserError, match="requires --gsp-zipf-alpha"):
        _draw(tok, *GSP, "--gsp-group-distribution", "zipf")


def test_gsp_num_turns_chains_rounds_and_tokenize_prompt_sends_ids(tok: Path) -> None:
    _, reqs, bodies = _draw(tok, *GSP, "--backend", "sglang-oai-chat", "--gsp-num-turns", "3")
    assert len(reqs) == 36 and [r.turn for r in reqs[:3]] == [0, 1, 2]
    assert reqs[0].next_turn == 1 and reqs[1].next_turn == 2 and reqs[2].next_turn is None
    assert [r.follows_replies for r in reqs[:3]] == [False, True, True]
    first, second = _text(bodies[0]), _text(bodies[1])
    assert len(first.split("\n\n")) == 2 and len(second.split()) == 4  # system prompt + question; then a question
    _, _, ids_bodies = _draw(tok, *GSP, "--backend", "sglang", "--tokenize-prompt")
    assert all(len(b["input_ids"]) == 12 for b in ids_bodies)  # 8 system + 4 question token ids
    with pytest.raises(UserError, match="requires --gsp-num-turns=1"):
        _draw(tok, *GSP, "--backend", "sglang", "--tokenize-prompt", "--gsp-num-turns", "2")


# ---- openai, longbench_v2, speed-bench -----------------------------------------------------------------------


def test_openai_rows_send_their_messages_and_own_fields(tok: Path, tmp_path: Path) -> None:
    path = tmp_path / "openai.jsonl"
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    rows = [{"messages": [{"role": "system", "content": "alpha bravo"}, {"role": "user", "content": "charlie"}],
             "max_tokens": 7, "temperature": 0.5, "tools": tools, "model": "ignored"},
            {"messages": [{"role": "user", "content": "delta echo foxtrot"}]}, {"messages": []}]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    args = ["--dataset-name", "openai", "--dataset-path", str(path), "--backend", "sglang-oai-chat",
            "--extra-request-body", '{"temperature": 0.9, "seed": 3}']  # fmt: skip
    _, reqs, bodies = _draw(tok, *args)
    assert [b["messages"] for b in bodies] == [rows[0]["messages"], rows[1]["messages"]]
    assert [b["max_tokens"] for b in bodies] == [7, 256]
    assert bodies[0]["temperature"] == 0.5 and bodies[1]["temperature"] == 0.9  # the row's own value wins
    assert bodies[0]["tools"] == tools and bodies[1]["seed"] == 3 and bodies[0]["model"] == "m"
    rendered = "<|system|> alpha bravo <|user|> charlie <|assistant|>"
    assert reqs[0].input_tokens == len(rendered.split()) + len(json.dumps(tools).split())
    _, _, fixed = _draw(tok, *args, "--sharegpt-output-len", "9")
    assert [b["max_tokens"] for b in fixed] == [9, 9]
    with pytest.raises(UserError, match="chat backend"):
        _draw(tok, *args[:4], "--backend", "sglang-oai")


_HUB_CHILD = r"""
import json, sys
from pathlib import Path
import datasets
from PIL import Image
from lmmbench.config.dropins.sglang_serving import build_parser, translate
from lmmbench.backends.openai_http import OpenAIHttpClient
from lmmbench.datasets.sglang.rows import SglTokenizer
from lmmbench.sessions.dropins.sglang_datasets import draw_rows, draw_sglang_requests
from lmmbench.testing.hf_datasets import write_dataset_cache

home, tok, rows = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
write_dataset_cache(home, "THUDM/LongBench-v2", None, {"train": rows})
images = [{"id": f"q{i}", "question": f"what is {i}", "image_1": Image.new("RGBA", (8 + i, 8), (i, 0, 0, 255))}
          for i in range(5)]
features = datasets.Features({"id": datasets.Value("string"), "question": datasets.Value("string"),
                              "image_1": datasets.Image()})
write_dataset_cache(home, "MMMU/MMMU", "Math", {"test": images, "validation": images[:1]}, features)
out = {}
for key, args in json.loads(sys.argv[4]).items():
    ns = build_parser().parse_args(["--port", "1", "--tokenizer", tok, *args])
    cfg, reqs = draw_sglang_requests(ns, translate(ns), lambda: None)
    client = OpenAIHttpClient(cfg.url, "m")
    out[key] = [{"body": client.body(r), "input_tokens": r.input_tokens} for r in reqs]
print(json.dumps(out))
"""
LONGBENCH_ROWS = [{"_id": str(i), "context": _words(5 + 10 * i), "question": "golf hotel", "choice_A": "a",
                   "choice_B": "b", "choice_C": "c", "choice_D": "d", "answer": "A"} for i in range(6)]  # fmt: skip
HUB_RUNS = {
    "longbench": ["--dataset-name", "longbench_v2", "--backend", "sglang-oai", "--num-prompts", "6"],
    "longbench_short": ["--dataset-name", "longbench_v2", "--backend", "sglang-oai", "--num-prompts", "6",
                        "--sharegpt-context-len", "40", "--sharegpt-output-len", "4"],
    "mmmu": ["--dataset-name", "mmmu", "--backend", "vllm-chat", "--num-prompts", "3", "--random-output-len", "9"],
}


@pytest.fixture(scope="module")
def hub_draws(tok: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """LongBench-v2 and MMMU (its Math config) written into a `datasets` cache and drawn offline, in one
    subprocess: `datasets` reads HF_HOME and offline mode when it is first imported."""
    import os
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("hf")
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(sys.path)}  # fmt: skip
    env.pop("HF_DATASETS_CACHE", None)
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run([sys.executable, "-c", _HUB_CHILD, str(home), str(tok), json.dumps(LONGBENCH_ROWS),
                           json.dumps(HUB_RUNS)], env=env, capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, list[dict[str, Any]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_longbench_v2_from_the_datasets_cache(hub_draws: dict[str, list[dict[str, Any]]]) -> None:
    drawn = hub_draws["longbench"]
    assert len(drawn) == 6 and all(d["body"]["max_tokens"] == 10 for d in drawn)
    contexts = {r["context"] for r in LONGBENCH_ROWS}
    for d in drawn:
        context, rest = d["body"]["prompt"].split("\n\n", 1)
        assert context in contexts and rest == "Question: golf hotel\nA. a\nB. b\nC. c\nD. d\nAnswer:"
        assert d["input_tokens"] == len(d["body"]["prompt"].split())
    kept = [r for r in LONGBENCH_ROWS if len(r["context"].split()) + 15 + 4 <= 40]  # 15: question and choices
    assert len(hub_draws["longbench_short"]) == len(kept) == 2
    assert all(d["body"]["max_tokens"] == 4 for d in hub_draws["longbench_short"])


def test_mmmu_from_the_datasets_cache(hub_draws: dict[str, list[dict[str, Any]]]) -> None:
    drawn = hub_draws["mmmu"]
    assert len(drawn) == 3 and all(d["body"]["max_tokens"] == 9 for d in drawn)
    seen = set()
    for d in drawn:
        image_part, text_part = d["body"]["messages"][0]["content"]
        i = int(text_part["text"].removeprefix("Question: what is ").removesuffix("\n\nAnswer: "))
        head, img = _image(image_part["image_url"]["url"])
        assert head == "data:image/png;base64" and img.mode == "RGB" and img.size == (8 + i, 8)
        seen.add(i)
    assert len(seen) == 3  # three different rows of five


def test_speed_bench_category_output_len_and_oversampling(tok: Path, tmp_path: Path) -> None:
    path = tmp_path / "speed.jsonl"
    rows = [{"category": cat, "turns": [_words(3, i), "later turn"]} for i, cat in
            enumerate(["mixed", "low_entropy", "mixed", "high_entropy"])]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows))
    args = ["--dataset-name", "speed-bench", "--dataset-path", str(path), "--backend", "sglang"]
    _, _, bodies = _draw(tok, *args, "--speed-bench-category", "mixed", "--speed-bench-output-len", "7",
                            "--num-prompts", "5")  # fmt: skip
    wanted = {f"<|user|> {rows[i]['turns'][0]} <|assistant|>" for i in (0, 2)}
    assert len(bodies) == 5 and {b["text"] for b in bodies} == wanted  # two rows, repeated to five
    assert all(b["sampling_params"]["max_new_tokens"] == 7 for b in bodies)
    _, every, _ = _draw(tok, *args, "--num-prompts", "4")
    assert len({r.payload["prompt"] for r in every}) == 4 and all(r.output_tokens == 512 for r in every)
    with pytest.raises(UserError, match="needs --dataset-path"):
        _draw(tok, "--dataset-name", "speed-bench")


# ---- mooncake --------------------------------------------------------------------------------------------------


def _trace(path: Path) -> Path:
    lines = [{"timestamp": 1000 + 400 * i, "input_length": 10, "output_length": 3 + i, "hash_ids": [i, i + 1]}
             for i in (2, 0, 1)]  # out of order: SGLang sorts by timestamp
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return path


def test_mooncake_rounds_slowdown_and_workload_file(tok: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    trace = _trace(tmp_path / "trace.jsonl")
    args = ["--dataset-name", "mooncake", "--backend", "sglang", "--mooncake-num-rounds", "2",
            "--mooncake-slowdown-factor", "0.5"]  # fmt: skip
    _, reqs, bodies = _draw(tok, *args, "--dataset-path", str(trace))
    assert [r.arrival_ns for r in reqs] == [0, 0, 200_000_000, 200_000_000, 400_000_000, 400_000_000]
    assert [b["sampling_params"]["max_new_tokens"] for b in bodies] == [3, 3, 4, 4, 5, 5]
    first, second = bodies[0]["text"], bodies[1]["text"]
    assert first.startswith("<|user|> Round 1: 0hi") and "1hi" in first and first.endswith("<|assistant|>")
    assert "<|assistant|> story story story <|user|> Round 2: 0hi" in second  # the placeholder reply, then round 2
    assert reqs[0].input_tokens == len(first.split())
    monkeypatch.setattr(sglang_datasets, "MOONCAKE_DIR", tmp_path)  # SGLang's /tmp/<workload>_trace.jsonl
    _trace(tmp_path / "toolagent_trace.jsonl")
    _, from_dir, _ = _draw(tok, *args, "--mooncake-workload", "toolagent", "--num-prompts", "2")
    assert [r.arrival_ns for r in from_dir] == [0, 0, 400_000_000, 400_000_000]  # the first two lines, sorted
    with pytest.raises(UserError, match="only with --backend sglang"):
        _draw(tok, *args, "--dataset-path", str(trace), "--backend", "sglang-oai")


@pytest.fixture(scope="module")
def native_server() -> Iterator[int]:
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=5, itl_ms=1)):
        yield port


def test_mooncake_and_trace_label_end_to_end(tok: Path, tmp_path: Path, native_server: int,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.jsonl"
    argv = ["bench", "sglang", "--backend", "sglang", "--port", str(native_server), "--tokenizer", str(tok),
            "--dataset-name", "mooncake", "--dataset-path", str(_trace(tmp_path / "t.jsonl")),
            "--mooncake-slowdown-factor", "0.1", "--use-trace-timestamps", "--output-file", str(out),
            "--output-details", "--disable-tqdm"]  # fmt: skip
    assert main(argv) == 0
    assert "Traffic request rate:                    trace" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["request_rate"] == "trace" and res["completed"] == 3 and res["output_lens"] == [3, 4, 5]


def test_image_run_prints_sglangs_vision_line_and_names_its_file(tok: Path, tmp_path: Path, native_server: int,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "sglang", "--backend", "sglang-oai-chat", "--port", str(native_server), "--tokenizer", str(tok),
            "--dataset-name", "image", "--num-prompts", "3", "--random-input-len", "5", "--random-output-len", "4",
            "--image-resolution", "8x8", "--disable-tqdm"]  # fmt: skip
    assert main(argv) == 0
    assert "Total input vision tokens:               n/a" in capsys.readouterr().out  # the processor's split: absent
    (name,) = [p.name for p in tmp_path.glob("*.jsonl")]
    assert re.fullmatch(r"sglang-oai-chat_\d{4}_3_5_4_1imgs_8x8\.jsonl", name)  # SGLang's name for image runs
    res = json.loads((tmp_path / name).read_text())
    assert res["completed"] == 3 and res["total_input_vision_tokens"] is None


# ---- agentic-trace: rounds with the server's own replies ---------------------------------------------------------


class _Recorder:
    """A chat server that streams "reply-N" to its N-th request and records every request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _reply(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply(json.dumps({"data": [{"id": "m"}]}).encode(), "application/json")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    rec.bodies.append(body)
                    n = len(rec.bodies)
                events = [{"choices": [{"index": 0, "delta": {"content": f"reply-{n}"}}]},
                          {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]  # fmt: skip
                self._reply(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
                            + b"data: [DONE]\n\n", "text/event-stream")  # fmt: skip

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    rec = _Recorder()
    rec.thread.start()
    try:
        yield rec
    finally:
        rec.httpd.shutdown()
        rec.httpd.server_close()


def test_agentic_trace_offset_max_turns_and_replies_fed_back(tmp_path: Path, recorder: _Recorder,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    convs = [[{"messages": [{"role": "system", "content": f"sys {c}"}, {"role": "user", "content": f"c{c} t0"}],
               "prompt_tokens": 50}, *[{"messages": [{"role": "tool", "content": f"c{c} t{t}"}]} for t in (1, 2, 3)]]
             for c in range(3)]  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"metadata": {}, "conversations": convs}))
    argv = ["bench", "sglang", "--backend", "sglang-oai-chat", "--port", str(recorder.port), "--dataset-name",
            "agentic-trace", "--dataset-path", str(path), "--num-prompts", "2", "--dataset-offset", "4",
            "--agentic-max-turns", "3", "--warmup-requests", "2", "--max-concurrency", "1",
            "--output-file", str(tmp_path / "o.jsonl"), "--disable-tqdm"]  # fmt: skip
    assert main(argv) == 0
    calls = [b for b in recorder.bodies if b.get("max_tokens") == 220]  # not the pre-flight probe
    warmup, sent = calls[:2], calls[2:]
    assert all(len(b["messages"]) == 2 and b["messages"][1]["role"] == "user" for b in warmup)  # first turns
    assert len(sent) == 6  # conversations 1 and 2 (offset 4 mod 3), three rounds each
    by_conv = [[b for b in sent if b["messages"][0]["content"] == f"sys {c}"] for c in (1, 2)]
    for c, rounds in zip((1, 2), by_conv, strict=True):
        assert [len(b["messages"]) for b in rounds] == [2, 4, 6]
        last = rounds[-1]["messages"]
        assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
        assert last[3]["content"] == f"c{c} t1" and last[5]["content"] == f"c{c} t2"
        replies = [m["content"] for m in last if m["role"] == "assistant"]
        numbers = [next(i for i, b in enumerate(recorder.bodies) if b is rounds[k]) + 1 for k in (0, 1)]
        assert replies == [f"reply-{n}" for n in numbers]  # what the server answered those rounds


# ---- image, mmmu ---------------------------------------------------------------------------------------------


def _image(uri: str) -> Any:
    from PIL import Image

    head, data = uri.split(",", 1)
    return head, Image.open(io.BytesIO(base64.b64decode(data)))


def test_image_count_resolution_format_and_content(tok: Path) -> None:
    args = ["--dataset-name", "image", "--num-prompts", "3", "--random-input-len", "6", "--random-output-len", "4",
            "--random-range-ratio", "1", "--image-count", "2", "--image-resolution", "16x24", "--image-format", "png",
            "--image-content", "blank"]  # fmt: skip
    _, _, bodies = _draw(tok, *args, "--backend", "sglang-oai-chat")
    for body in bodies:
        parts = body["messages"][0]["content"]
        assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
        assert len(parts[2]["text"].split()) == 6 and body["max_tokens"] == 4
        for p in parts[:2]:
            head, img = _image(p["image_url"]["url"])
            assert head == "data:image/png;base64" and img.size == (24, 16)  # HEIGHTxWIDTH
            assert img.convert("RGB").getextrema() == ((255, 255),) * 3  # blank: white
    _, _, native = _draw(tok, *args[:-8], "--image-count", "3", "--random-image-count", "--image-resolution",
                         "random:8x8-20x30", "--backend", "sglang", "--num-prompts", "8")  # fmt: skip
    counts = [len(b["image_data"]) for b in native]
    assert set(counts) <= {1, 2, 3} and len(set(counts)) > 1
    sizes = {_image(u)[1].size for b in native for u in b["image_data"]}
    assert len(sizes) > 1 and all(8 <= w <= 30 and 8 <= h <= 20 for w, h in sizes)
    assert all(_image(u)[0] == "data:image/jpeg;base64" for b in native for u in b["image_data"])
    text = native[0]["text"]  # the chat template over the images and the text
    assert text.startswith("<|user|> " + "<|image_pad|> " * counts[0]) and text.endswith("<|assistant|>")
    assert "<|image_pad|>" not in text.split("<|image_pad|> ")[-1]  # the random text leaves the image token out
    with pytest.raises(UserError, match="image rows only"):
        _draw(tok, *args, "--backend", "vllm")
