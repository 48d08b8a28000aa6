"""``vllm bench serve``'s ``burstgpt``, ``spec_bench`` and ``hf`` samplers (vLLM 0.33.0), on the readers that
``lmmbench perf`` uses for the same data sets (``datasets.vllm.hub_datasets``), registered in
``vllm_bench_requests.MORE_SAMPLERS``.

As vLLM draws them: BurstGPT's rows picked as pandas' ``DataFrame.sample(n, random_state=seed)`` picks them
(numpy's ``RandomState(seed).choice``, with replacement when n exceeds the rows), each prompt the decoded ids
``(i + j) % vocab_size`` of its request length; Spec-Bench's first turns through vLLM's custom sampler, the
tokenizer's chat template always applied (vLLM's ``spec_bench`` does not pass ``--skip-chat-template`` on); the
``hf`` rows with ``--hf-name`` / ``--hf-split`` / ``--hf-subset`` / ``--hf-output-len`` (``--output-len`` over
the last two), images as media parts of the chat message.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmbench.core.errors import UserError
from lmmbench.datasets.vllm import samplers as vs
from lmmbench.datasets.vllm.bench_requests import MORE_SAMPLERS, chat_template
from lmmbench.datasets.vllm.hub_datasets import HfOptions, burstgpt_rows, hf_items, spec_bench_prompts

__all__ = ["sample_burstgpt", "sample_hf", "sample_spec_bench"]


def _path(ns: argparse.Namespace, what: str) -> Path:
    if ns.dataset_path is None:
        raise UserError(f"--dataset-name {ns.dataset_name} needs --dataset-path: {what}")
    path = Path(ns.dataset_path)
    if not path.is_file():
        raise UserError(f"--dataset-path {path}: file not found")
    return path


def sample_burstgpt(ns: argparse.Namespace, tok: vs.VllmTokenizer, rngs: vs.VllmRng,
                    tokenizer_dir: Path | None) -> list[vs.VllmSample]:  # fmt: skip
    """vLLM's ``BurstGPTDataset.sample``: the row's request tokens as a synthetic prompt, its response tokens."""
    rows = burstgpt_rows(_path(ns, "BurstGPT's CSV (e.g. BurstGPT_without_fails_2.csv)"))
    n = ns.num_prompts
    picks = vs._np().random.RandomState(ns.seed).choice(len(rows), size=n, replace=n > len(rows))
    out = []
    for i, pick in enumerate(picks):
        in_len, out_len = rows[int(pick)]
        prompt = tok.decode([(i + j) % tok.vocab_size for j in range(in_len)])
        out.append(vs.VllmSample(prompt, in_len, out_len, None, f"{ns.request_id_prefix}{i}"))
    return out


def sample_spec_bench(ns: argparse.Namespace, tok: vs.VllmTokenizer, rngs: vs.VllmRng,
                      tokenizer_dir: Path | None) -> list[vs.VllmSample]:  # fmt: skip
    """vLLM's ``SpecBench``: first turns (of --spec-bench-category), shuffled, through the chat template."""
    path = _path(ns, "Spec-Bench's question.jsonl")
    prompts = spec_bench_prompts(path, ns.spec_bench_category, ns.seed, not ns.disable_shuffle)
    out_len = ns.output_len if ns.output_len is not None else ns.spec_bench_output_len
    template = chat_template(tokenizer_dir, ns.chat_template_kwargs, "spec_bench", skippable=False)
    return vs.custom_samples(tok, rngs, [{"prompt": p} for p in prompts], ns.num_prompts, out_len,
                             ns.request_id_prefix, ns.no_oversample, template, path)  # fmt: skip


def sample_hf(ns: argparse.Namespace, tok: vs.VllmTokenizer, rngs: vs.VllmRng,
              tokenizer_dir: Path | None) -> list[vs.VllmSample]:  # fmt: skip
    """vLLM's ``hf`` data sets: the kept rows, an image as the chat message's media part."""
    out_len = ns.output_len if ns.output_len is not None else ns.hf_output_len
    opts = HfOptions(ns.hf_name, ns.dataset_path, ns.hf_subset, ns.hf_split, out_len, ns.seed,
                     not ns.disable_shuffle)  # fmt: skip
    out = []
    for i, it in enumerate(hf_items(opts, tok.tok, ns.num_prompts)):
        if it.image is not None and ns.backend not in ("openai-chat",):
            raise UserError(f"--dataset-name hf {opts.hf_name or opts.dataset_path} sends images: use --backend "
                            "openai-chat --endpoint /v1/chat/completions (as vLLM)")  # fmt: skip
        prompt = it.text if it.system is None else f"{it.system}\n\n{it.text}"
        mm = None if it.image is None else [it.image]
        out.append(vs.VllmSample(prompt, it.prompt_len, it.output_len, mm, f"{ns.request_id_prefix}{i}"))
    return out


MORE_SAMPLERS.update(burstgpt=sample_burstgpt, spec_bench=sample_spec_bench, hf=sample_hf)
