"""lmmbench's samplers of vLLM's datasets draw the same requests as vLLM 0.33.0's own sampler code for the same
seed: the expected draws were made by vLLM's ``vllm/benchmarks/datasets/datasets.py`` itself (run from the
release's wheel by ``benchmarks/vllm_sampler_fixtures.py``; version, file hash and commit in the fixture), on the
same byte-level BPE tokenizer (its hash is checked), so a difference here is a difference from vLLM.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.datasets.vllm import samplers as vs
from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "vllm_samplers.json").read_text())


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> vs.VllmTokenizer:
    path = build_sampler_tokenizer(tmp_path_factory.mktemp("tok"))
    assert hashlib.sha256((path / "tokenizer.json").read_bytes()).hexdigest() == FIXTURE["tokenizer_sha256"]
    return vs.VllmTokenizer.load(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "vllm_sampler_fixtures", Path(__file__).parents[2] / "benchmarks" / "vllm_sampler_fixtures.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # the same data files the fixture was drawn from
    d = tmp_path_factory.mktemp("data")
    (d / "sharegpt.json").write_text(json.dumps(script.sharegpt_rows()), encoding="utf-8")
    (d / "custom.jsonl").write_text("".join(json.dumps(r) + "\n" for r in script.custom_rows()), encoding="utf-8")
    return {"sharegpt": d / "sharegpt.json", "custom": d / "custom.jsonl"}


def _draw(case: dict[str, Any], tok: vs.VllmTokenizer, files: dict[str, Path]) -> list[vs.VllmSample]:
    seed, n, name = case["seed"], case["num_prompts"], case["name"]
    if name == "random":
        return vs.sample_random(tok, seed, n, case["input_len"], case["output_len"], case.get("range_ratio", 0.0),
                                case.get("prefix_len", 0), "r-")  # fmt: skip
    if name == "random-mm":
        mm = vs.MmOptions(case["base_items"], case["items_range_ratio"], case["limits"],
                          {tuple(k): v for k, v in case["buckets"]})  # fmt: skip
        return vs.sample_random_mm(tok, seed, n, case["input_len"], case["output_len"], 0.0,
                                   case.get("prefix_len", 0), "m-", mm)  # fmt: skip
    if name == "prefix_repetition":
        return vs.sample_prefix_repetition(tok, vs.VllmRng(seed), n, case["prefix_len"], case["suffix_len"],
                                           case["num_prefixes"], case["output_len"])  # fmt: skip
    if name == "sharegpt":
        return vs.sample_sharegpt(tok, vs.VllmRng(seed), files["sharegpt"], n, case["output_len"], "s-")
    return vs.sample_custom(tok, vs.VllmRng(seed), files["custom"], n, case["output_len"], "c-")


def _image(part: dict[str, Any]) -> dict[str, Any]:
    from PIL import Image

    url = part["image_url"]["url"]
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    return {"type": "image", "width": image.width, "height": image.height,
            "sha256": hashlib.sha256(url.encode()).hexdigest()}  # fmt: skip


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{c['name']}-seed{c['seed']}-n{c['num_prompts']}")
def test_samplers_draw_the_requests_vllm_draws(case: dict[str, Any], tok: vs.VllmTokenizer,
                                               files: dict[str, Path]) -> None:  # fmt: skip
    got = [{"prompt_ids": tok.encode(s.prompt), "prompt_len": s.prompt_len, "output_len": s.output_len,
            "request_id": s.request_id, "mm": [_image(p) for p in s.mm or []]}
           for s in _draw(case, tok, files)]  # fmt: skip
    assert got == case["requests"]


def test_the_fixture_says_where_it_came_from() -> None:
    src = FIXTURE["source"]
    assert (src["package"], src["version"], src["file"]) == ("vllm", "0.33.0", "vllm/benchmarks/datasets/datasets.py")
    assert src["commit"] and len(src["sha256"]) == 64
    mm_cases = [c for c in FIXTURE["cases"] if c["name"] == "random-mm"]
    assert any(r["mm"] for c in mm_cases for r in c["requests"])  # the fixture does carry images
