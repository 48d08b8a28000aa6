"""Run vLLM's own request samplers and store what they draw, for tests/perf/test_vllm_samplers.py.

vLLM's ``vllm/benchmarks/datasets/datasets.py`` is loaded from a downloaded release (nothing of it is copied into
lmmbench), with small stand-ins for the engine modules it imports; a Hugging Face fast tokenizer wraps the
test tokenizer (``lmmbench.testing.sampler_tokenizer``). For each case the drawn requests are stored as token
ids of the prompt, prompt and output lengths, request ids and, for random-mm, the sizes of the images and a hash
of their pixels, with the vLLM version, file and commit they came from.

    pip download --no-deps --only-binary=:all: vllm==0.33.0 -d /tmp/vllm && cd /tmp/vllm && unzip -q vllm-*.whl
    python benchmarks/vllm_sampler_fixtures.py --vllm /tmp/vllm --out tests/perf/fixtures/vllm_samplers.json

Needs numpy, pillow, pandas and transformers (the ``models`` and ``eval`` extras).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import io
import json
import random
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

CASES: list[dict[str, Any]] = [
    {"name": "random", "seed": 0, "num_prompts": 12, "input_len": 40, "output_len": 8},
    {"name": "random", "seed": 7, "num_prompts": 10, "input_len": 33, "output_len": 20, "range_ratio": 0.5,
     "prefix_len": 9},
    {"name": "random", "seed": 3, "num_prompts": 6, "input_len": 30, "output_len": 12,
     "range_ratio": {"input": 0.3, "output": 0.8}},
    {"name": "random-mm", "seed": 0, "num_prompts": 6, "input_len": 20, "output_len": 5, "base_items": 2,
     "items_range_ratio": 0.5, "limits": {"image": 3, "video": 0},
     "buckets": [[[16, 24, 1], 0.5], [[8, 8, 1], 0.3], [[32, 16, 1], 0.2]]},
    {"name": "random-mm", "seed": 5, "num_prompts": 5, "input_len": 16, "output_len": 4, "base_items": 1,
     "items_range_ratio": 1.0, "limits": {"image": 1, "video": 1}, "prefix_len": 3,
     "buckets": [[[12, 20, 1], 0.7], [[8, 8, 1], 0.3]]},
    {"name": "prefix_repetition", "seed": 0, "num_prompts": 12, "prefix_len": 16, "suffix_len": 8,
     "num_prefixes": 3, "output_len": 5},
    {"name": "sharegpt", "seed": 4, "num_prompts": 9, "output_len": None},
    {"name": "sharegpt", "seed": 0, "num_prompts": 30, "output_len": 7},
    {"name": "custom", "seed": 2, "num_prompts": 8, "output_len": 11},
]  # fmt: skip


def sharegpt_rows() -> list[dict[str, Any]]:
    """A small ShareGPT file: conversations of several lengths (some filtered out by vLLM's rules)."""
    rng = random.Random(11)
    words = "the quick brown fox jumps over lazy dog seven wizards hex a jovial bank clerk".split()
    rows: list[dict[str, Any]] = []
    for i in range(14):
        turns = [{"from": "human", "value": " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))},
                 {"from": "gpt", "value": " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))}]
        rows.append({"id": str(i), "conversations": turns if i % 5 else turns[:1]})
    return rows


def custom_rows() -> list[dict[str, Any]]:
    """A small custom JSONL file (vLLM's format)."""
    return [{"prompt": f"question {i}: what is {i} times {i + 3}?", "output_tokens": 3 + i} for i in range(5)]


def _stub(name: str, **attrs: Any) -> None:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod


def load_vllm_datasets(root: Path) -> Any:
    """vLLM's datasets module from ``root`` (an unzipped wheel), its engine imports replaced by stand-ins."""

    class _Placeholder:
        def __init__(self, name: str) -> None:
            self.name = name

        def placeholder_attr(self, attr: str) -> Any:
            return None

    for pkg in ("vllm", "vllm.benchmarks", "vllm.benchmarks.datasets", "vllm.lora", "vllm.multimodal",
                "vllm.transformers_utils", "vllm.utils"):  # fmt: skip
        _stub(pkg, __path__=[])
    _stub("vllm.tokenizers", TokenizerLike=Any)
    _stub("vllm.inputs", MultiModalDataDict=dict)
    _stub("vllm.lora.request", LoRARequest=object)
    _stub("vllm.lora.utils", get_adapter_absolute_path=lambda p: p)
    _stub("vllm.multimodal.audio", get_audio_duration=lambda *a, **k: 0.0)
    _stub("vllm.multimodal.image", convert_image_mode=lambda image, mode: image.convert(mode))
    _stub("vllm.multimodal.utils", encode_image_url=None, fetch_image=None)
    _stub("vllm.transformers_utils.repo_utils", hf_api=None)
    _stub("vllm.utils.argparse_utils", FlexibleArgumentParser=argparse.ArgumentParser)
    _stub("vllm.utils.import_utils", PlaceholderModule=_Placeholder)
    _stub("vllm.utils.mistral", is_mistral_tokenizer=lambda tok: False)
    _stub("pybase64", b64encode=base64.b64encode)
    for name in ("utils", "datasets"):
        path = root / "vllm" / "benchmarks" / "datasets" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"vllm.benchmarks.datasets.{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["vllm.benchmarks.datasets.datasets"]


def _image_facts(part: dict[str, Any]) -> dict[str, Any]:
    from PIL import Image

    url = part["image_url"]["url"]
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    return {"type": "image", "width": image.width, "height": image.height, "sha256": hashlib.sha256(url.encode())
            .hexdigest()}  # fmt: skip


def facts(samples: list[Any], tok: Any) -> list[dict[str, Any]]:
    """What is compared: prompt ids, lengths, request ids, media."""
    out = []
    for s in samples:
        mm = s.multi_modal_data or []
        out.append({"prompt_ids": tok(s.prompt, add_special_tokens=False).input_ids, "prompt_len": s.prompt_len,
                    "output_len": s.expected_output_len, "request_id": s.request_id,
                    "mm": [_image_facts(p) for p in (mm if isinstance(mm, list) else [mm])]})  # fmt: skip
    return out


def run_case(ds: Any, case: dict[str, Any], tok: Any, files: dict[str, Path]) -> list[dict[str, Any]]:
    """Draw one case with vLLM's classes, seeded as ``vllm bench serve`` seeds them."""
    import numpy as np

    seed, n = case["seed"], case["num_prompts"]
    random.seed(seed)
    np.random.seed(seed)
    name = case["name"]
    if name == "random":
        samples = ds.RandomDataset(random_seed=seed).sample(
            tokenizer=tok, num_requests=n, prefix_len=case.get("prefix_len", 0), input_len=case["input_len"],
            output_len=case["output_len"], range_ratio=case.get("range_ratio", 0.0), request_id_prefix="r-")
    elif name == "random-mm":
        samples = ds.RandomMultiModalDataset(random_seed=seed).sample(
            tokenizer=tok, num_requests=n, prefix_len=case.get("prefix_len", 0), input_len=case["input_len"],
            output_len=case["output_len"], range_ratio=0.0, base_items_per_request=case["base_items"],
            num_mm_items_range_ratio=case["items_range_ratio"], limit_mm_per_prompt=case["limits"],
            bucket_config={tuple(k): v for k, v in case["buckets"]}, request_id_prefix="m-")
    elif name == "prefix_repetition":
        samples = ds.PrefixRepetitionRandomDataset(random_seed=seed).sample(
            tokenizer=tok, num_requests=n, prefix_len=case["prefix_len"], suffix_len=case["suffix_len"],
            num_prefixes=case["num_prefixes"], output_len=case["output_len"])
    elif name == "sharegpt":
        samples = ds.ShareGPTDataset(random_seed=seed, dataset_path=str(files["sharegpt"])).sample(
            tokenizer=tok, num_requests=n, output_len=case["output_len"], request_id_prefix="s-")
    else:
        samples = ds.CustomDataset(random_seed=seed, dataset_path=str(files["custom"])).sample(
            tokenizer=tok, num_requests=n, output_len=case["output_len"], skip_chat_template=True,
            request_id_prefix="c-")
    return facts(samples, tok)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", type=Path, required=True, help="an unzipped vLLM wheel")
    ap.add_argument("--commit", default="4ba787ec9", help="the release's commit (vllm/_version.py)")
    ap.add_argument("--out", type=Path, default=Path("tests/perf/fixtures/vllm_samplers.json"))
    args = ap.parse_args()
    from transformers import PreTrainedTokenizerFast

    from lmmbench.testing.sampler_tokenizer import build_sampler_tokenizer

    version = (args.vllm / "vllm" / "_version.py").read_text(encoding="utf-8")
    ds = load_vllm_datasets(args.vllm)
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = build_sampler_tokenizer(Path(tmp) / "tok")
        tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_dir / "tokenizer.json"), bos_token="<s>",
                                      eos_token="</s>")  # fmt: skip
        files = {"sharegpt": Path(tmp) / "sharegpt.json", "custom": Path(tmp) / "custom.jsonl"}
        files["sharegpt"].write_text(json.dumps(sharegpt_rows()), encoding="utf-8")
        files["custom"].write_text("".join(json.dumps(r) + "\n" for r in custom_rows()), encoding="utf-8")
        out = {
            "source": {"package": "vllm", "version": "0.33.0" if "'0.33.0'" in version else version,
                       "commit": args.commit, "file": "vllm/benchmarks/datasets/datasets.py",
                       "sha256": hashlib.sha256((args.vllm / "vllm/benchmarks/datasets/datasets.py").read_bytes())
                       .hexdigest()},
            "tokenizer_sha256": hashlib.sha256((tok_dir / "tokenizer.json").read_bytes()).hexdigest(),
            "cases": [{**case, "requests": run_case(ds, case, tok, files)} for case in CASES],
        }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(out['cases'])} cases")


if __name__ == "__main__":
    main()
