"""Run SGLang's own ``bench_serving`` data-set loaders and store what they draw, for
tests/perf/test_bench_sglang_datasets.py (``test_loaders_draw_what_sglangs_own_draw``).

SGLang's ``sglang/benchmark/datasets/*.py`` are loaded from an unpacked release (nothing of them is copied into
lmmbench; the heavy ``sglang`` package init is skipped with empty package stand-ins, ``pybase64`` with the
standard library's base64), on a Hugging Face fast tokenizer over the test tokenizer (a word-level one with a chat
template, both stored in the output; the cases named in ``BOS_CASES`` on one that puts a BOS token before every
text, with a template that starts with it, as Llama's do). For each case the input files, the command line and the
drawn rows are stored: prompt, prompt length, output length, each image's SHA-256, the row's own request fields.

    pip download --no-deps --only-binary=:all: sglang==0.5.23 -d /tmp/sg && cd /tmp/sg && unzip -q sglang-*.whl
    python benchmarks/sglang_loader_fixtures.py --sglang /tmp/sg --out tests/perf/fixtures/sglang_loaders.json

Needs numpy, pillow and transformers. ``generated-shared-prefix`` caches its rows in ~/.cache/sglang: HOME is
pointed at a temporary folder, so every case draws afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
EXTRA_WORDS = ["<|user|>", "<|assistant|>", "<|system|>", "<|image_pad|>", "Assistant:"]
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {% if m['content'] is string %}{{ m['content'] }}"
            "{% else %}{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% else %}"
            "<|image_pad|> {% endif %}{% endfor %}{% endif %} {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")  # fmt: skip


def _w(n: int, s: int = 0) -> str:
    return " ".join(WORDS[(s + i) % len(WORDS)] for i in range(n))


_ENDS = [" Assistant:" if i % 2 else "" for i in range(30)]
FILES = {
    "sg.json": json.dumps([{"conversations": [{"from": "human", "value": _w(i + 1, i) + _ENDS[i]},
                                              {"from": "gpt", "value": _w(3 + i % 4)}]} for i in range(30)]),
    "custom.jsonl": "\n".join(json.dumps({"conversations": [{"role": "user", "content": _w(2 + i % 5, i)},
                                                            {"role": "assistant", "content": _w(4)}]})
                              for i in range(12)),
    "lb.jsonl": "\n".join(json.dumps({"context": _w(4 + 3 * i, i), "question": "q " + _w(2), "choice_A": "a",
                                      "choice_B": "b", "choice_C": "c", "choice_D": "d"}) for i in range(9)),
    "sb.jsonl": "\n".join(json.dumps({"category": ["mixed", "low_entropy"][i % 2], "turns": [_w(3 + i, i)]})
                          for i in range(6)),
    "oa.jsonl": "\n".join(json.dumps({"messages": [{"role": "user", "content": _w(2 + i)}], "max_tokens": 5 + i,
                                      **({"tools": [{"type": "function", "function": {"name": "f"}}],
                                          "temperature": 0.3} if i % 2 else {})}) for i in range(4)),
    "at.json": json.dumps({"conversations": [[{"messages": [{"role": "user", "content": f"c{c} t{t}"}],
                                               "prompt_tokens": 9 + c} for t in range(4)] for c in range(5)]}),
    "mc.jsonl": "\n".join(json.dumps({"timestamp": 100 * (5 - i), "input_length": 9, "output_length": 3 + i,
                                      "hash_ids": [i, 7]}) for i in range(4)),
}  # fmt: skip
GSP = ["--dataset-name", "generated-shared-prefix", "--gsp-num-groups", "3", "--gsp-prompts-per-group", "4",
       "--gsp-system-prompt-len", "9", "--gsp-question-len", "5", "--gsp-output-len", "6", "--seed", "7"]
IMAGE = ["--dataset-name", "image", "--num-prompts", "4", "--random-input-len", "7", "--random-output-len", "5",
         "--random-range-ratio", "0.5", "--image-resolution", "6x10"]
#: name -> the command line (``{dir}``: the folder of FILES)
CASES: dict[str, list[str]] = {
    "gsp": GSP, "gsp_range": [*GSP, "--gsp-range-ratio", "0.3"], "gsp_ordered": [*GSP, "--gsp-ordered"],
    "gsp_zipf": [*GSP, "--gsp-group-distribution", "zipf", "--gsp-zipf-alpha", "1.5"],
    "gsp_turns": [*GSP, "--gsp-num-turns", "3", "--backend", "sglang-oai-chat"],
    "gsp_ids": [*GSP, "--tokenize-prompt"], "gsp_fast": [*GSP, "--gsp-fast-prepare"],
    "sharegpt_suffix": ["--dataset-name", "sharegpt", "--dataset-path", "{dir}/sg.json", "--num-prompts", "12",
                        "--prompt-suffix", " be brief"],
    "sharegpt_context": ["--dataset-name", "sharegpt", "--dataset-path", "{dir}/sg.json", "--num-prompts", "12",
                         "--sharegpt-context-len", "12", "--prompt-suffix", "x", "--seed", "3"],
    "custom_suffix": ["--dataset-name", "custom", "--dataset-path", "{dir}/custom.jsonl", "--num-prompts", "8",
                      "--prompt-suffix", " ok", "--sharegpt-output-len", "5"],
    "random_ids": ["--dataset-name", "random", "--dataset-path", "{dir}/sg.json", "--num-prompts", "7",
                   "--random-input-len", "20", "--random-output-len", "8", "--random-range-ratio", "0.25",
                   "--tokenize-prompt"],
    "random_ids_offsets": ["--dataset-name", "random-ids", "--num-prompts", "7", "--random-input-len", "20",
                           "--random-output-len", "8", "--random-range-ratio", "0.25", "--tokenize-prompt"],
    "longbench": ["--dataset-name", "longbench_v2", "--dataset-path", "{dir}/lb.jsonl", "--num-prompts", "5",
                  "--sharegpt-context-len", "40"],
    "speed_mixed": ["--dataset-name", "speed-bench", "--dataset-path", "{dir}/sb.jsonl", "--num-prompts", "2",
                    "--speed-bench-category", "mixed"],
    "speed_oversampled": ["--dataset-name", "speed-bench", "--dataset-path", "{dir}/sb.jsonl", "--num-prompts", "8",
                          "--speed-bench-output-len", "9"],
    "openai": ["--dataset-name", "openai", "--dataset-path", "{dir}/oa.jsonl", "--num-prompts", "3",
               "--backend", "sglang-oai-chat"],
    "agentic": ["--dataset-name", "agentic-trace", "--dataset-path", "{dir}/at.json", "--num-prompts", "3",
                "--dataset-offset", "7", "--agentic-max-turns", "2", "--backend", "sglang-oai-chat"],
    "mooncake": ["--dataset-name", "mooncake", "--dataset-path", "{dir}/mc.jsonl", "--num-prompts", "3",
                 "--mooncake-num-rounds", "2"],
    "image_png": [*IMAGE, "--image-resolution", "6x10", "--image-format", "png", "--backend", "vllm-chat"],
    "image_random": [*IMAGE, "--random-image-count", "--image-count", "3", "--image-resolution",
                     "random:4x4-8x12", "--backend", "sglang"],
    "image_blank": [*IMAGE, "--image-content", "blank", "--backend", "sglang-oai-chat"],
    "sharegpt_chat": ["--dataset-name", "sharegpt", "--dataset-path", "{dir}/sg.json", "--num-prompts", "12",
                      "--apply-chat-template", "--prompt-suffix", " be brief"],
    "sharegpt_chat_bos": ["--dataset-name", "sharegpt", "--dataset-path", "{dir}/sg.json", "--num-prompts", "12",
                          "--apply-chat-template", "--sharegpt-context-len", "16", "--seed", "5"],
    "custom_chat_bos": ["--dataset-name", "custom", "--dataset-path", "{dir}/custom.jsonl", "--num-prompts", "8",
                        "--apply-chat-template", "--prompt-suffix", " ok"],
    "gsp_chat_ignored": [*GSP, "--apply-chat-template"],  # a loader that never reads the flag
    "speed_chat_ignored": ["--dataset-name", "speed-bench", "--dataset-path", "{dir}/sb.jsonl", "--num-prompts", "3",
                           "--apply-chat-template"],
}  # fmt: skip
#: the cases drawn with the BOS tokenizer: BOS put before every encoded text, the template starting with it
BOS_CASES = ("sharegpt_chat_bos", "custom_chat_bos")
BOS = "<s>"
BOS_TEMPLATE = "{{ bos_token }}" + TEMPLATE


def _load_sglang(root: Path) -> dict[str, Any]:
    sys.modules.setdefault("pybase64", types.SimpleNamespace(b64encode=base64.b64encode))  # type: ignore[arg-type]
    for name, path in (("sglang", root / "sglang"), ("sglang.benchmark", root / "sglang" / "benchmark")):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    import importlib

    names = ("generated_shared_prefix", "sharegpt", "custom", "random", "longbench_v2", "speed_bench",
             "openai_dataset", "agentic_trace", "mooncake", "image")
    return {n: importlib.import_module(f"sglang.benchmark.datasets.{n}") for n in names}


class _Processor:
    """The processor calls SGLang's image rows make: the tokenizer's chat template; its token counts are not
    stored (lmmbench leaves them to the server)."""

    def __init__(self, tok: Any) -> None:
        self.tokenizer, self.image_token_id = tok, tok.convert_tokens_to_ids("<|image_pad|>")

    def apply_chat_template(self, messages: Any, **kw: Any) -> Any:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def __call__(self, **kw: Any) -> Any:
        return {"input_ids": types.SimpleNamespace(numel=lambda: 0)}


def _draw(sg: dict[str, Any], ns: Any, hf: Any) -> list[Any]:
    import numpy as np

    random.seed(ns.seed)
    np.random.seed(ns.seed)
    name = ns.dataset_name
    if name == "generated-shared-prefix":
        return list(sg["generated_shared_prefix"].GeneratedSharedPrefixDataset.from_args(ns).load(hf))
    if name == "mooncake":
        recs = sg["mooncake"].MooncakeDataset.from_args(ns).load(hf)

        async def rows() -> list[Any]:
            return [r async for r in sg["mooncake"].get_mooncake_request_over_time(recs, hf, 0.0,
                                                                                    ns.mooncake_num_rounds)]

        return asyncio.run(rows())
    if name == "image":
        ds = sg["image"].ImageDataset.from_args(ns)
        return list(sg["image"].sample_image_requests(
            ds.num_requests, ds.image_count, ds.input_len, ds.output_len, ds.range_ratio, _Processor(hf),
            ds.image_content, ds.image_format, ds.image_resolution, ds.backend, ds.random_image_count))
    module, cls = {"sharegpt": ("sharegpt", "ShareGPTDataset"), "custom": ("custom", "CustomDataset"),
                   "random": ("random", "RandomDataset"), "random-ids": ("random", "RandomDataset"),
                   "longbench_v2": ("longbench_v2", "LongBenchV2Dataset"),
                   "speed-bench": ("speed_bench", "SpeedBenchDataset"), "openai": ("openai_dataset", "OpenAIDataset"),
                   "agentic-trace": ("agentic_trace", "AgenticTraceDataset")}[name]  # fmt: skip
    return list(getattr(sg[module], cls).from_args(ns).load(hf))


def row_view(prompt: Any, prompt_len: Any, output_len: Any, images: Any, extra: Any) -> dict[str, Any]:
    """What is stored (and compared) of one row."""
    return {"prompt": prompt, "prompt_len": prompt_len, "output_len": int(output_len),
            "images": [hashlib.sha256(u.encode()).hexdigest() for u in images or []], "extra": extra or {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sglang", type=Path, required=True, help="folder holding the unpacked sglang package")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from transformers import PreTrainedTokenizerFast

    from lmmbench.config.dropins.sglang_serving import build_parser
    from lmmbench.testing import build_word_tokenizer

    sg = _load_sglang(args.sglang)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HOME"] = tmp  # SGLang's generated-shared-prefix cache goes there, not into ~/.cache
        folder = Path(tmp)
        for name, text in FILES.items():
            (folder / name).write_text(text, encoding="utf-8")
        tok = build_word_tokenizer(folder / "tok", EXTRA_WORDS)
        (tok / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
        tok_bos = build_word_tokenizer(folder / "tok_bos", EXTRA_WORDS, bos=BOS)
        (tok_bos / "tokenizer_config.json").write_text(json.dumps({"chat_template": BOS_TEMPLATE, "bos_token": BOS}))
        hfs = {"": PreTrainedTokenizerFast.from_pretrained(str(tok)),
               "bos": PreTrainedTokenizerFast.from_pretrained(str(tok_bos))}  # fmt: skip
        assert hfs["bos"].bos_token == BOS and hfs["bos"].encode("alpha")[0] == hfs["bos"].convert_tokens_to_ids(BOS)
        out: dict[str, Any] = {"sglang": "0.5.23", "words": WORDS, "extra_words": EXTRA_WORDS, "template": TEMPLATE,
                               "bos": BOS, "bos_template": BOS_TEMPLATE, "files": FILES, "cases": {}}  # fmt: skip
        for case, line in CASES.items():
            argv = [a.replace("{dir}", str(folder)) for a in line]
            import shutil

            shutil.rmtree(Path(tmp) / ".cache", ignore_errors=True)
            which = "bos" if case in BOS_CASES else ""
            rows = _draw(sg, build_parser().parse_args(argv), hfs[which])
            out["cases"][case] = {"argv": line, **({"tokenizer": which} if which else {}),
                                  "rows": [row_view(r.prompt, r.prompt_len, r.output_len, r.image_data,
                                                    r.extra_request_body) for r in rows]}  # fmt: skip
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
