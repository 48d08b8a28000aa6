"""vLLM 0.33.0's `burstgpt`, `spec_bench` and `hf` data sets: each read from a small file or an on-disk `datasets`
cache built here (the hub offline), with vLLM's sampling where it is plain Python; every `hf` data set vLLM names is
accepted or refused by name.

The `hf` cases run in one subprocess: `datasets` reads HF_HOME and offline mode when it is first imported, so a
process of their own sees the cache written here whatever other tests imported before.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.datasets.perf.catalog import build_requests
from lmmbench.datasets.perf.registry import load_tokenizer
from lmmbench.datasets.vllm.hub_datasets import HF_DATASETS, HF_REFUSED
from lmmbench.testing import build_word_tokenizer

VLLM_HF_CLASSES = {  # every HuggingFaceDataset subclass of vllm 0.33.0 (vllm/benchmarks/datasets/datasets.py)
    "ConversationDataset", "MultiModalConversationDataset", "VisionArenaDataset", "MMVUDataset",
    "InstructCoderDataset", "MTBenchDataset", "HumanEvalDataset", "GSM8KDataset", "BlazeditDataset", "AIMODataset",
    "NextEditPredictionDataset", "ASRDataset", "MLPerfDataset", "MMStarDataset", "BFCLDataset",
}  # fmt: skip
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_word_tokenizer(tmp_path_factory.mktemp("tok"))


def _cfg(**kw: Any) -> PerfConfig:
    return PerfConfig.model_validate({"endpoint": "completions", "seed": 3, **kw})


def test_burstgpt_keeps_gpt4_rows_with_a_response(tmp_path: Path, tok_dir: Path) -> None:
    csv = tmp_path / "BurstGPT_1.csv"
    rows = [("0", "ChatGPT", "50", "7"), ("1", "GPT-4", "12", "0"), ("2", "GPT-4", "9", "5"), ("3", "GPT-4", "20", "3"),
            ("4", "GPT-4", "15", "11")]  # fmt: skip
    body = "".join(f"{t},{m},{i},{o},{int(i) + int(o)},Conversation log\n" for t, m, i, o in rows)
    csv.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + body)
    reqs = build_requests(_cfg(dataset="burstgpt", dataset_path=csv), 3, load_tokenizer(tok_dir))  # --output-tokens
    # is not used: the rows' own response tokens are (vLLM has no override either)
    assert sorted((r.input_tokens, r.output_tokens) for r in reqs) == [(9, 5), (15, 11), (20, 3)]  # exact lengths
    assert {r.payload["max_tokens"] for r in reqs} == {5, 11, 3}
    more = build_requests(_cfg(dataset="burstgpt", dataset_path=csv), 7, load_tokenizer(tok_dir))
    assert len(more) == 7 and {(r.input_tokens, r.output_tokens) for r in more} <= {(9, 5), (15, 11), (20, 3)}
    csv.write_text("Timestamp,Model\n0,GPT-4\n")
    with pytest.raises(UserError, match="not a BurstGPT CSV"):
        build_requests(_cfg(dataset="burstgpt", dataset_path=csv), 1)


def test_spec_bench_first_turns_in_vllms_order(tmp_path: Path) -> None:
    """vLLM: rows of the category, `random.seed(seed); random.shuffle(rows)`, the first N, topped up with
    `random.choice` after `random.seed(seed)`; its output length 256 by default."""
    path = tmp_path / "question.jsonl"
    rows = [{"question_id": i, "category": "math" if i % 2 else "writing", "turns": [f"q{i} {WORDS[i % 10]}", "b"]}
            for i in range(12)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reqs = build_requests(_cfg(dataset="spec_bench", dataset_path=path, spec_bench_category="math"), 9)
    expected = [r["turns"][0] for r in rows if r["category"] == "math"]
    random.seed(3)
    random.shuffle(expected)
    random.seed(3)
    expected += [random.choice(expected) for _ in range(3)]
    assert [r.payload["prompt"] for r in reqs] == expected
    assert {r.payload["max_tokens"] for r in reqs} == {256}
    chat = build_requests(_cfg(dataset="spec_bench", dataset_path=path, endpoint="chat", spec_bench_output_len=8), 2)
    assert chat[0].payload["messages"][-1]["role"] == "user" and chat[0].payload["max_tokens"] == 8


def test_every_vllm_hf_data_set_is_accepted_or_refused_by_name() -> None:
    classes = {c.vllm_class for c in HF_DATASETS.values()}
    refused = {re.search(r"vLLM's (\w+Dataset)", why).group(1) for why in HF_REFUSED.values()}  # type: ignore[union-attr]
    assert classes | refused == VLLM_HF_CLASSES and not set(HF_DATASETS) & set(HF_REFUSED)
    with pytest.raises(UserError, match="refused: vLLM's MMVUDataset"):
        build_requests(_cfg(dataset="hf", hf_name="yale-nlp/MMVU"), 1)
    with pytest.raises(UserError, match="not one of vLLM's hf data sets"):
        build_requests(_cfg(dataset="hf", dataset_path="someone/else"), 1)


_CHILD = r'''
import json, sys
from pathlib import Path
from PIL import Image
from lmmbench.testing.hf_datasets import write_dataset_cache
from lmmbench.config.perf.options import PerfConfig
from lmmbench.datasets.perf.catalog import build_requests
from lmmbench.datasets.perf.registry import load_tokenizer

home, tok_dir = Path(sys.argv[1]), sys.argv[2]
words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
def text(i, n): return " ".join(words[(i + j) % 10] for j in range(n))
gsm = [{"question": text(i, 5 + i), "answer": "42"} for i in range(6)]
write_dataset_cache(home, "openai/gsm8k", "main", {"train": gsm[:2], "test": gsm[2:]})
write_dataset_cache(home, "philschmid/mt-bench", None, {"train": [{"question_id": i, "category": "x",
    "turns": [text(i, 7), "second"]} for i in range(3)]})
aimo = [{"problem": text(i, 6), "solution": text(i, n), "answer": "1", "url": "u"} for i, n in enumerate((8, 2, 9))]
write_dataset_cache(home, "AI-MO/aimo-validation-aime", None, {"train": aimo})
write_dataset_cache(home, "mgoin/mlperf-inference-llama2-data", None, {"train": [{"system_prompt": "be brief",
    "question": text(1, 6), "output": text(2, 10)}]})
img = Image.new("RGB", (8, 8), (255, 0, 0))
write_dataset_cache(home, "lmarena-ai/VisionArena-Chat", None, {"train": [{"conversation": [[{"role": "user",
    "content": text(3, 4)}]], "images": [img]}]})
tok = load_tokenizer(tok_dir)
out = {}
for name, kw in (("gsm8k", {"hf_name": "openai/gsm8k"}), ("mtbench", {"dataset_path": "philschmid/mt-bench"}),
                 ("aimo", {"hf_name": "AI-MO/aimo-validation-aime"}),
                 ("mlperf", {"hf_name": "mgoin/mlperf-inference-llama2-data", "endpoint": "chat"}),
                 ("arena", {"hf_name": "lmarena-ai/VisionArena-Chat", "endpoint": "chat"})):
    cfg = PerfConfig.model_validate({"dataset": "hf", "endpoint": "completions", "seed": 5, **kw})
    out[name] = [{"payload": r.payload, "in": r.input_tokens, "out": r.output_tokens}
                 for r in build_requests(cfg, 4, tok)]
write_dataset_cache(home, "openai/gsm8k", "socratic", {"test": [{"question": "socratic " + text(i, 5), "answer": "1"}
                                                                for i in range(3)]})
from lmmbench.config.dropins.vllm_serve import build_parser, translate
from lmmbench.sessions.dropins.vllm_session import build_bench_requests
for name, line in (("bs_gsm8k_plain", "--hf-name openai/gsm8k --disable-shuffle --hf-output-len 7"),
                   ("bs_gsm8k_shuffled", "--hf-name openai/gsm8k --hf-output-len 7"),
                   ("bs_gsm8k_train", "--hf-name openai/gsm8k --hf-split train --disable-shuffle --output-len 9"),
                   ("bs_gsm8k_socratic", "--hf-name openai/gsm8k --hf-subset socratic --disable-shuffle"),
                   ("bs_mtbench", "--dataset-path philschmid/mt-bench --disable-shuffle"),
                   ("bs_aimo", "--hf-name AI-MO/aimo-validation-aime --disable-shuffle"),
                   ("bs_mlperf", "--hf-name mgoin/mlperf-inference-llama2-data"),
                   ("bs_arena", "--hf-name lmarena-ai/VisionArena-Chat --backend openai-chat "
                                "--endpoint /v1/chat/completions"),
                   ("bs_arena_completions", "--hf-name lmarena-ai/VisionArena-Chat")):
    ns = build_parser().parse_args(["--dataset-name", "hf", "--num-prompts", "2", "--seed", "5", "--tokenizer",
                                    tok_dir, *line.split()])
    translate(ns)
    try:
        out[name] = [{"payload": r.payload, "in": r.input_tokens} for r in build_bench_requests(ns)[0]]
    except Exception as exc:
        out[name] = str(exc)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def hf_requests(tmp_path_factory: pytest.TempPathFactory, tok_dir: Path) -> dict[str, list[dict[str, Any]]]:
    home = tmp_path_factory.mktemp("hf_home")
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": str(Path(__file__).parents[2] / "src"), "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _CHILD, str(home), str(tok_dir)], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_hf_gsm8k_and_mt_bench_from_the_datasets_cache(hf_requests: dict[str, list[dict[str, Any]]]) -> None:
    """GSM8K: subset main, split test (vLLM's defaults), 256 output tokens; MT-Bench by --dataset-path, first
    turns; both shuffled by datasets with the seed, oversampled as vLLM does when rows run short."""
    gsm = hf_requests["gsm8k"]
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
    test_questions = {" ".join(words[(i + j) % 10] for j in range(5 + i)) for i in range(2, 6)}
    assert {r["payload"]["prompt"] for r in gsm} == test_questions  # the test split only, every row
    assert all(r["in"] == len(r["payload"]["prompt"].split()) and r["out"] == 256 for r in gsm)
    mt = hf_requests["mtbench"]
    assert len(mt) == 4 and {r["payload"]["prompt"] for r in mt} <= {" ".join(words[(i + j) % 10] for j in range(7))
                                                                     for i in range(3)}  # fmt: skip
    assert {r["out"] for r in mt} == {256}


def test_hf_aimo_lengths_from_the_solution_and_vllms_filter(hf_requests: dict[str, list[dict[str, Any]]]) -> None:
    """AIMO: output length = the solution's tokens; a row with a solution under 4 tokens is dropped
    (vLLM's is_valid_sequence), so the 4 requests come from the 2 rows left."""
    assert {(r["in"], r["out"]) for r in hf_requests["aimo"]} == {(6, 8), (6, 9)}
    assert len(hf_requests["aimo"]) == 4


def test_hf_mlperf_system_prompt_and_vision_arena_image(hf_requests: dict[str, list[dict[str, Any]]]) -> None:
    msgs = hf_requests["mlperf"][0]["payload"]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[0]["content"] == "be brief"
    assert hf_requests["mlperf"][0]["out"] == 10  # the reference answer's tokens
    parts = hf_requests["arena"][0]["payload"]["messages"][-1]["content"]
    assert parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,") and parts[1]["type"] == "text"
    assert hf_requests["arena"][0]["out"] == 128  # VisionArena's default output length


def test_bench_serve_hf_flags(hf_requests: dict[str, list[dict[str, Any]]]) -> None:
    """--hf-name / --hf-split / --hf-subset / --hf-output-len (and --output-len over it) pick the rows and lengths
    of vLLM's hf data sets for `bench serve`; --disable-shuffle keeps the split's order."""
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()

    def text(i: int, n: int) -> str:
        return " ".join(words[(i + j) % 10] for j in range(n))

    def prompts(name: str) -> list[str]:
        return [r["payload"]["prompt"] for r in hf_requests[name]]

    assert prompts("bs_gsm8k_plain") == [text(2, 7), text(3, 8)]  # gsm8k's test split (vLLM's), in its order
    assert {r["payload"]["max_tokens"] for r in hf_requests["bs_gsm8k_plain"]} == {7}
    assert [r["in"] for r in hf_requests["bs_gsm8k_plain"]] == [7, 8]
    shuffled = prompts("bs_gsm8k_shuffled")  # datasets' shuffle(seed=5), as perf's hf reader draws them
    assert shuffled == [r["payload"]["prompt"] for r in hf_requests["gsm8k"]][:2] != prompts("bs_gsm8k_plain")
    assert prompts("bs_gsm8k_train") == [text(0, 5), text(1, 6)]
    assert {r["payload"]["max_tokens"] for r in hf_requests["bs_gsm8k_train"]} == {9}
    assert prompts("bs_gsm8k_socratic") == ["socratic " + text(i, 5) for i in range(2)]
    assert {r["payload"]["max_tokens"] for r in hf_requests["bs_gsm8k_socratic"]} == {256}  # vLLM's GSM8K default
    assert prompts("bs_mtbench") == [text(0, 7), text(1, 7)]
    aimo = hf_requests["bs_aimo"]  # the solution's length, rows under vLLM's length filter dropped
    assert [(r["payload"]["prompt"], r["payload"]["max_tokens"]) for r in aimo] == [(text(0, 6), 8), (text(2, 6), 9)]
    assert {r["payload"]["prompt"] for r in hf_requests["bs_mlperf"]} == {f"be brief\n\n{text(1, 6)}"}
    [part_text, image] = hf_requests["bs_arena"][0]["payload"]["messages"][0]["content"]
    assert part_text == {"type": "text", "text": text(3, 4)}
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert "openai-chat" in str(hf_requests["bs_arena_completions"])  # vLLM sends images on chat backends only


def _templated_tokenizer(tmp: Path) -> Path:
    """vLLM's sampler tokenizer with a chat template (vLLM's spec_bench applies it to every prompt)."""
    from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer

    tok = build_sampler_tokenizer(tmp / "tok")
    (tok / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}"}))  # noqa: E501
    return tok


def test_bench_serve_and_perf_take_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """`vllm bench serve --dataset-name spec_bench / burstgpt` command lines, and `perf --dataset spec_bench` with
    vLLM's flag names, against the test server."""
    from lmmbench.cli.main import main
    from lmmbench.config.perf.testserver import TestServerConfig
    from lmmbench.core.net import free_loopback_port
    from lmmbench.testing import running_testserver

    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"category": c, "turns": [f"{c} question {i}"]}) + "\n"
                                              for i, c in enumerate(["math", "qa"] * 3)))  # fmt: skip
    (tmp_path / "b.csv").write_text("Timestamp,Model,Request tokens,Response tokens\n0,GPT-4,6,4\n1,GPT-4,8,3\n")
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=1.0, itl_ms=0.2)) as url:
        base = ["--model", "test-model", "--port", str(port), "--num-prompts", "5", "--save-result",
                "--result-filename", "r.json", "--tokenizer", str(_templated_tokenizer(tmp_path))]  # fmt: skip
        assert main(["bench", "serve", "--dataset-name", "spec_bench", "--dataset-path", "q.jsonl", *base]) == 0
        assert json.loads(Path("r.json").read_text())["total_output_tokens"] == 5 * 256  # vLLM's default
        assert main(["bench", "serve", "--dataset-name", "burstgpt", "--dataset-path", "b.csv", *base]) == 0
        assert json.loads(Path("r.json").read_text())["total_output_tokens"] in range(5 * 3, 5 * 4 + 1)
        assert main(["perf", "--url", url, "--dataset", "spec_bench", "--dataset-path", "q.jsonl", "--endpoint",
                     "completions", "--spec-bench-category", "qa", "--spec-bench-output-len", "6",
                     "--num-requests", "4", "--out-dir", str(tmp_path / "perf"), "--no-plots"]) == 0  # fmt: skip
    [records] = list((tmp_path / "perf").glob("perf/*/records.jsonl"))
    assert [json.loads(x)["output_tokens"] for x in records.read_text().splitlines()] == [6] * 4
    capsys.readouterr()
