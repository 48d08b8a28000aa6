"""Perf datasets: exact-length synthetic prompts, word mode, ShareGPT, simple JSONL, multimodal manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.datasets.perf.catalog import build_requests
from lmmbench.datasets.perf.registry import load_tokenizer
from lmmbench.testing import build_word_tokenizer


def test_synthetic_prompts_have_exact_token_lengths_and_are_seeded(tmp_path: Path) -> None:
    tok = load_tokenizer(build_word_tokenizer(tmp_path / "tok"))
    cfg = PerfConfig(input_tokens=77, input_tokens_stddev=10, output_tokens=9, seed=5)
    reqs = build_requests(cfg, 20, tok)
    for r in reqs:
        text = r.payload["messages"][-1]["content"]
        assert len(tok.encode(text, add_special_tokens=False).ids) == r.input_tokens
        assert r.payload["max_tokens"] == 9 and r.payload["ignore_eos"] is True
    assert len({r.input_tokens for r in reqs}) > 3
    assert [r.payload for r in build_requests(cfg, 20, tok)] == [r.payload for r in reqs]


def test_word_mode_without_tokenizer() -> None:
    cfg = PerfConfig(input_tokens=128, output_tokens=32, endpoint="completions", ignore_eos=False)
    reqs = build_requests(cfg, 3)
    assert all(len(r.payload["prompt"].split()) == 128 and r.input_tokens == 128 for r in reqs)
    assert "ignore_eos" not in reqs[0].payload


def test_sharegpt_and_jsonl(tmp_path: Path) -> None:
    sg = tmp_path / "sg.jsonl"
    rows = [{"conversations": [{"from": "human", "value": "hi there you"}, {"from": "gpt", "value": "a b c d"}]},
            {"conversations": [{"from": "gpt", "value": "no human"}]}]  # fmt: skip
    sg.write_text("\n".join(json.dumps(r) for r in rows))
    reqs = build_requests(PerfConfig(dataset="sharegpt", dataset_path=sg, output_tokens=0), 2)
    assert reqs[0].input_tokens == 3 and reqs[0].payload["max_tokens"] == 4
    js = tmp_path / "simple.jsonl"
    js.write_text('{"prompt": "one two", "max_tokens": 5}\n{"messages": [{"role": "user", "content": "x"}]}\n')
    reqs = build_requests(PerfConfig(dataset="jsonl", dataset_path=js, output_tokens=7), 4)
    assert {len(r.payload["messages"]) for r in reqs} == {1}
    assert all(r.payload["max_tokens"] == 7 for r in reqs)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"nope": 1}\n')
    with pytest.raises(UserError, match=r"bad.jsonl:2"):
        build_requests(PerfConfig(dataset="jsonl", dataset_path=bad), 2)


def test_multimodal_manifest_builds_data_uris(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "a.png").write_bytes(b"\x89PNG fake")
    (tmp_path / "media" / "a.wav").write_bytes(b"RIFF fake")
    csv = tmp_path / "manifest.csv"
    csv.write_text("id,video,image,audio,prompt,lang\ns1,,media/a.png,media/a.wav,describe,en\ns2,,,,just text,fr\n")
    reqs = build_requests(PerfConfig(dataset="multimodal", dataset_path=csv, seed=1), 2)
    parts = {r.payload["messages"][-1]["content"][-1]["text"]: r.payload["messages"][-1]["content"] for r in reqs}
    img, aud, _text = parts["describe"]
    assert img["image_url"]["url"].startswith("data:image/png;base64,")
    assert aud["input_audio"]["format"] == "wav"
    assert parts["just text"] == [{"type": "text", "text": "just text"}]
    missing = tmp_path / "m2.csv"
    missing.write_text("id,video,image,audio,prompt\ns1,,nope.png,,x\n")
    with pytest.raises(UserError):
        build_requests(PerfConfig(dataset="multimodal", dataset_path=missing), 1)
