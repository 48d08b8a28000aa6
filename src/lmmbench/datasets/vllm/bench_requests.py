"""The requests and the send schedule of a ``vllm bench serve`` command line, as vLLM 0.33.0 sends them.

From a parsed command line (``config.dropins.vllm_serve``): the drawn requests (``datasets.vllm.samplers``), each
one's body as vLLM's request functions write it (completions: ``prompt``, ``repetition_penalty`` 1.0,
``max_tokens``, ``logprobs``; chat: one user message of a text part then the media parts,
``max_completion_tokens``; then ``ignore_eos`` and the extra body with the sampling flags), the model (or the LoRA
module vLLM would pick), the headers (``--header``, ``x-request-id``), and the target send time of each request
(vLLM's ``get_request``: gamma gaps of shape ``--burstiness`` from numpy's global generator, rescaled so the last
request is due at num_prompts / rate; ``--ramp-up-*`` rates per request, not rescaled).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.datasets.chat_templates import find_chat_template, read_json_object
from lmmbench.datasets.vllm import samplers as vs

__all__ = ["CHAT_BACKENDS", "MORE_SAMPLERS", "build_vllm_requests", "chat_template", "draw_samples", "request_rates",
           "vllm_schedule_s"]

#: vLLM's backends whose requests go to the chat API (and may carry images / videos)
CHAT_BACKENDS = ("openai-chat",)
#: further --dataset-name samplers, registered by their modules: (command line, tokenizer, generators,
#: tokenizer path) -> drawn requests (the name must also be in config.dropins.vllm_serve's _DATASETS)
MORE_SAMPLERS: dict[str, Callable[[argparse.Namespace, vs.VllmTokenizer, vs.VllmRng, Path | None],
                                  list[vs.VllmSample]]] = {}  # fmt: skip


def chat_template(tokenizer_dir: Path | None, kwargs: dict[str, Any] | None, dataset: str = "custom",
                  skippable: bool = True) -> Any:  # fmt: skip
    """The tokenizer's chat template as a function of one user prompt (vLLM applies it to custom and spec_bench
    prompts)."""
    folder = None if tokenizer_dir is None else (tokenizer_dir if tokenizer_dir.is_dir() else tokenizer_dir.parent)
    template = None if folder is None else find_chat_template(folder)
    if template is None:
        how = "add --skip-chat-template" if skippable else "give a --tokenizer that has one"
        raise UserError(f"--dataset-name {dataset} applies the tokenizer's chat template, as vLLM does, and this "
                        f"tokenizer has none (chat_template.jinja, tokenizer_config.json's chat_template or "
                        f"chat_template.json); {how}")  # fmt: skip
    specials = _special_tokens(read_json_object(folder / "tokenizer_config.json")) if folder else {}

    def apply(prompt: str) -> str:
        import jinja2

        try:
            return template.render(**{**specials, "messages": [{"role": "user", "content": prompt}],
                                      "add_generation_prompt": True, **(kwargs or {})})  # fmt: skip
        except jinja2.TemplateError as exc:
            raise UserError(f"{template.source}: the chat template failed on a prompt: {exc}") from None

    return apply


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """The named special tokens (``bos_token``, ``eos_token``, ...) transformers hands to a chat template."""
    out = {}
    for key, value in config.items():
        value = value.get("content") if isinstance(value, dict) else value
        if key.endswith("_token") and isinstance(value, str):
            out[key] = value
    return out


def _buckets(value: Any) -> dict[tuple[int, int, int], float] | None:
    """--random-mm-bucket-config as vLLM's parser leaves it (a dict keyed by tuples, or its text)."""
    if value is None:
        return None
    import ast

    try:
        parsed = value if isinstance(value, dict) else ast.literal_eval(str(value))
        buckets = {tuple(int(x) for x in k): float(v) for k, v in parsed.items()}
    except (ValueError, SyntaxError, TypeError, AttributeError, MemoryError, RecursionError):
        raise UserError(f"--random-mm-bucket-config {value!r}: expected a dict like "
                        "'{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}'") from None  # fmt: skip
    for key in buckets:
        if len(key) != 3 or min(key) < 1:
            raise UserError(f"--random-mm-bucket-config: {key}: a bucket is (height, width, frames), each >= 1")
        for side in key[:2]:
            check_limit("image_side", side, f"--random-mm-bucket-config {key}: a side of")
        # a video bucket may hold no more pixels than the largest image
        check_limit("image_side", math.isqrt(key[0] * key[1] * key[2]), f"--random-mm-bucket-config {key}: "
                    "the square root of height x width x frames")  # fmt: skip
    return buckets  # type: ignore[return-value]


def draw_samples(ns: argparse.Namespace, tok: vs.VllmTokenizer, rngs: vs.VllmRng,
                 tokenizer_dir: Path | None) -> list[vs.VllmSample]:  # fmt: skip
    """The requests vLLM's sampler of ``--dataset-name`` draws for this command line (the samplers of
    ``MORE_SAMPLERS`` are registered by their modules: ``vllm_hub_samplers``, imported by the caller)."""
    name, n, seed, pre = ns.dataset_name, ns.num_prompts, ns.seed, ns.request_id_prefix
    if name in MORE_SAMPLERS:
        return MORE_SAMPLERS[name](ns, tok, rngs, tokenizer_dir)
    in_len = ns.input_len if ns.input_len is not None else ns.random_input_len
    out_len = ns.output_len if ns.output_len is not None else ns.random_output_len
    ratio = ns.random_range_ratio
    if isinstance(ratio, str):
        try:
            ratio = json.loads(ratio)
        except ValueError:
            raise UserError(f"--random-range-ratio {ratio!r}: a number, or {{\"input\": r, \"output\": r}}") from None
    if name in ("random", "random-mm", "prefix_repetition") and n < 1:
        raise UserError(f"--num-prompts {n}: {name} draws at least one prompt")
    if name in ("random", "random-mm", "prefix_repetition") and ns.dataset_path is not None:
        raise UserError(f"--dataset-name {name} takes no --dataset-path (as vLLM)")
    if name in ("sharegpt", "custom") and ns.dataset_path is None:
        raise UserError(f"--dataset-name {name} needs --dataset-path")
    shuffle, over = not ns.disable_shuffle, ns.no_oversample
    if name == "random":
        return vs.sample_random(tok, seed, n, in_len, out_len, ratio, ns.random_prefix_len, pre)
    if name == "random-mm":
        mm = vs.MmOptions(ns.random_mm_base_items_per_request, ns.random_mm_num_mm_items_range_ratio,
                          ns.random_mm_limit_mm_per_prompt, _buckets(ns.random_mm_bucket_config))  # fmt: skip
        return vs.sample_random_mm(tok, seed, n, in_len, out_len, ratio, ns.random_prefix_len, pre, mm)
    if name == "prefix_repetition":
        out = ns.output_len if ns.output_len is not None else ns.prefix_repetition_output_len
        return vs.sample_prefix_repetition(tok, rngs, n, ns.prefix_repetition_prefix_len,
                                           ns.prefix_repetition_suffix_len, ns.prefix_repetition_num_prefixes,
                                           out, shuffle)  # fmt: skip
    path = Path(ns.dataset_path)
    if not path.is_file():
        raise UserError(f"--dataset-path {path}: file not found")
    if name in ("custom_image", "timed_trace"):
        return _draw_media_or_trace(ns, tok, rngs, path)
    if name == "sharegpt":
        out = ns.output_len if ns.output_len is not None else ns.sharegpt_output_len
        return vs.sample_sharegpt(tok, rngs, path, n, out, pre, shuffle, over)
    out = ns.output_len if ns.output_len is not None else ns.custom_output_len
    template = None if ns.skip_chat_template else chat_template(tokenizer_dir, ns.chat_template_kwargs)
    return vs.sample_custom(tok, rngs, path, n, out, pre, shuffle, over, template)


def _draw_media_or_trace(ns: argparse.Namespace, tok: vs.VllmTokenizer, rngs: vs.VllmRng,
                         path: Path) -> list[vs.VllmSample]:  # fmt: skip
    from lmmbench.datasets.vllm import trace_image_samplers as ts

    if ns.dataset_name == "custom_image":
        out = ns.output_len if ns.output_len is not None else ns.custom_output_len
        return ts.sample_custom_image(tok, rngs, path, ns.num_prompts, out, ns.request_id_prefix,
                                      not ns.disable_shuffle, ns.no_oversample, ns.custom_ensure_client_side_data)
    labels = ts.TraceLabels(ns.timed_trace_chunk_hash_size, ns.timed_trace_sec_multiplier,
                            ns.timed_trace_label_timestamp, ns.timed_trace_label_input_length,
                            ns.timed_trace_label_output_length, ns.timed_trace_label_hash_ids)  # fmt: skip
    return ts.sample_timed_trace(tok, rngs, path, ns.num_prompts, labels, ns.request_id_prefix)


def request_rates(n: int, ns: argparse.Namespace) -> list[float]:
    """The rate in force at each of ``n`` requests: --request-rate, or the --ramp-up-* ramp (vLLM's)."""
    ramp, rate = ns.ramp_up_strategy, float(ns.request_rate)
    if ramp is None:
        return [rate] * n
    lo, hi = float(ns.ramp_up_start_rps), float(ns.ramp_up_end_rps)
    steps = [i / max(n - 1, 1) for i in range(n)]
    return [lo + (hi - lo) * p if ramp == "linear" else lo * (hi / lo) ** p for p in steps]


def vllm_schedule_s(n: int, ns: argparse.Namespace, np_rng: Any) -> list[float]:
    """Send times (seconds from the start) of ``n`` requests, as vLLM's ``get_request`` computes them."""
    ramp, rate, shape = ns.ramp_up_strategy, float(ns.request_rate), float(ns.burstiness)
    delays: list[float] = []
    for i, r in enumerate(request_rates(n, ns)):
        if r <= 0:
            raise UserError(f"request {i}: a request rate of {r} req/s; --ramp-up-start-rps must be above 0")
        if math.isinf(r):
            delays.append(0.0)
        elif math.isinf(shape):
            delays.append(1.0 / r)
        else:
            delays.append(float(np_rng.gamma(shape=shape, scale=1.0 / (r * shape))))
    for i in range(1, n):
        delays[i] += delays[i - 1]
    if ramp is None and n and delays[-1] != 0:  # vLLM closes the 1-2 % gap to n / rate
        factor = (n / rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


def _body(ns: argparse.Namespace, s: vs.VllmSample, model: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    if ns.backend in CHAT_BACKENDS:
        if isinstance(s.prompt, list):  # OpenAI content parts (custom_image), then any media
            content = [*s.prompt, *(s.mm or [])]
        elif ns.enable_multimodal_chat:
            content = [{"text": s.prompt, "type": "text"}, *(s.mm or [])]
        else:
            content = [{"type": "text", "text": s.prompt}, *(s.mm or [])]
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}],
                                "max_completion_tokens": s.output_len}  # fmt: skip
    else:  # vLLM's completions request leaves a sample's images out (random-mm is refused before)
        body = {"model": model, "prompt": s.prompt, "repetition_penalty": 1.0, "max_tokens": s.output_len,
                "logprobs": ns.logprobs}  # fmt: skip
    if model is None:  # no --model: the client sends the server's first model, as vLLM asks /v1/models for it
        del body["model"]
    if ns.ignore_eos:
        body["ignore_eos"] = True
    body.update(extra)
    return body


def _lora(ns: argparse.Namespace, n: int, rngs: vs.VllmRng) -> list[str] | None:
    mods = list(ns.lora_modules or [])
    if not mods:
        return None
    if ns.lora_assignment == "round-robin":
        return [mods[i % len(mods)] for i in range(n)]
    return [rngs.py.choice(mods) for _ in range(n)]


def build_vllm_requests(ns: argparse.Namespace, samples: list[vs.VllmSample], model: str | None, rngs: vs.VllmRng,
                        extra_body: dict[str, Any], headers: dict[str, str]) -> list[PerfRequest]:  # fmt: skip
    """The requests of the run, bodies and headers as vLLM sends them, each with its send time."""
    lora = _lora(ns, len(samples), rngs)
    if ns.self_timed:  # timed_trace: each request at its own timestamp
        times = [s.timestamp or 0.0 for s in samples]
    else:
        times = vllm_schedule_s(len(samples), ns, rngs.np)
    endpoint = "chat" if ns.backend in CHAT_BACKENDS else "completions"
    out = []
    for i, s in enumerate(samples):
        hdrs = dict(headers)
        if s.request_id:
            hdrs["x-request-id"] = s.request_id
        body = _body(ns, s, lora[i] if lora else model, extra_body)
        out.append(PerfRequest(i, body, endpoint, s.prompt_len, s.output_len, arrival_ns=round(times[i] * 1e9),
                               headers=hdrs))  # fmt: skip
    return out
