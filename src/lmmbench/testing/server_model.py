"""What the test server models beyond fixed delays: a prefix cache (TTFT = ``ttft_ms`` +
uncached prompt tokens x ``prefill_ms_per_token``) and a Prometheus ``/metrics`` page under the
names vLLM, SGLang and TGI use, so scraping and prefix-cache workloads are tested end to end.

Prompt tokens are whitespace words (the test server's tokenizer). The cache holds full blocks of
``prefix_block_tokens`` words, each keyed by the hash of everything before it (as vLLM's prefix
caching keys blocks), least recently used first out once ``kv_capacity_tokens`` is full.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from lmmbench.config.perf.testserver import TestServerConfig

__all__ = ["PrefixCacheModel", "render_metrics"]


class PrefixCacheModel:
    """Block-level prefix cache of one server process, with the counters /metrics shows."""

    def __init__(self, cfg: TestServerConfig) -> None:
        self.enabled = cfg.prefix_cache
        self.block = cfg.prefix_block_tokens
        self.capacity_blocks = max(cfg.kv_capacity_tokens // self.block, 1)
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.query_tokens = 0
        self.hit_tokens = 0
        self.active_tokens = 0  # prompt + output tokens of the streams being served (KV in use)
        self.generated_tokens = 0  # output tokens streamed so far

    def lookup_and_fill(self, words: list[str]) -> int:
        """Cached prefix tokens of a prompt; its full blocks are cached afterwards."""
        self.query_tokens += len(words)
        if not self.enabled:
            return 0
        hit = 0
        h = 0
        missed = False
        for j in range(len(words) // self.block):
            h = hash((h, tuple(words[j * self.block : (j + 1) * self.block])))
            if not missed and h in self.blocks:
                hit += self.block
                self.blocks.move_to_end(h)
                continue
            missed = True
            self.blocks[h] = None
            if len(self.blocks) > self.capacity_blocks:
                self.blocks.popitem(last=False)
        self.hit_tokens += hit
        return hit


def _split(total: float, parts: int, i: int, whole: bool = False) -> float:
    """Engine ``i``'s share of ``total`` (whole numbers go to the first engines first)."""
    if whole:
        return float(int(total) // parts + (i < int(total) % parts))
    return total / parts


def _spec_decode(add: Any, cfg: TestServerConfig, generated: float, label: str) -> None:
    """vLLM's spec-decode counters of one engine: every step drafts k tokens, each accepted with probability a
    (rounded per position), and emits its accepted tokens plus one."""
    k, a = cfg.spec_draft_tokens, cfg.spec_acceptance
    drafts = int(generated // (1 + k * a))
    per_pos = round(drafts * a)
    add("vllm:spec_decode_num_drafts_total", "counter", drafts)
    add("vllm:spec_decode_num_draft_tokens_total", "counter", drafts * k)
    add("vllm:spec_decode_num_accepted_tokens_total", "counter", per_pos * k)
    for pos in range(k):
        add("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", per_pos,
            label[:-1] + f',position="{pos}"}}')


def render_metrics(cfg: TestServerConfig, cache: PrefixCacheModel, running: int, waiting: int) -> bytes:
    """The Prometheus text page, with the metric names of ``cfg.metrics_names`` (vLLM 0.33 / SGLang 0.5.23 /
    TGI), one label set per engine (``cfg.metrics_engines``), each engine holding its share of the load."""
    n = cfg.metrics_engines
    cap = max(cfg.kv_capacity_tokens, 1)
    families: dict[str, tuple[str, list[str]]] = {}  # name -> (kind, sample lines): one TYPE line per name
    names = ("vllm", "sglang", "tgi") if cfg.metrics_names == "all" else (cfg.metrics_names,)
    for i in range(n):
        run_i, wait_i = _split(running, n, i, True), _split(waiting, n, i, True)
        used_i = _split(cache.active_tokens, n, i)
        q_i, h_i = _split(cache.query_tokens, n, i), _split(cache.hit_tokens, n, i)
        usage = min(used_i / (cap / n), 1.0)
        hit_rate = cache.hit_tokens / cache.query_tokens if cache.query_tokens else 0.0
        label = f'{{model_name="{cfg.model}",engine="{i}"}}'

        def add(name: str, kind: str, value: float, labels: str = label) -> None:
            families.setdefault(name, (kind, []))[1].append(f"{name}{labels} {value}")

        if "vllm" in names:
            add("vllm:num_requests_running", "gauge", run_i)
            add("vllm:num_requests_waiting", "gauge", wait_i)
            add("vllm:kv_cache_usage_perc", "gauge", usage)
            add("vllm:prefix_cache_queries_total", "counter", q_i)
            add("vllm:prefix_cache_hits_total", "counter", h_i)
            add("vllm:prompt_tokens_total", "counter", q_i)
            add("vllm:prompt_tokens_cached_total", "counter", h_i)
            add("vllm:num_preemptions_total", "counter", 0)
            if cfg.spec_draft_tokens:
                _spec_decode(add, cfg, _split(cache.generated_tokens, n, i, True), label)
        if "vllm-legacy" in names:  # vLLM's names before the V1 engine: telemetry's deprecated fallbacks
            add("vllm:num_requests_running", "gauge", run_i)
            add("vllm:num_requests_waiting", "gauge", wait_i)
            add("vllm:gpu_cache_usage_perc", "gauge", usage)
            add("vllm:gpu_prefix_cache_hit_rate", "gauge", hit_rate)
        if "sglang" in names:
            dp = f'{{model_name="{cfg.model}",dp_rank="{i}"}}'
            add("sglang:num_running_reqs", "gauge", run_i, dp)
            add("sglang:num_queue_reqs", "gauge", wait_i, dp)
            add("sglang:token_usage", "gauge", usage, dp)
            add("sglang:num_used_tokens", "gauge", used_i, dp)
            add("sglang:max_total_num_tokens", "gauge", cap / n, dp)
            add("sglang:cache_hit_rate", "gauge", hit_rate, dp)
            add("sglang:prompt_tokens_total", "counter", q_i, dp)
            add("sglang:cached_tokens_total", "counter", h_i, dp)
            add("sglang:num_retracted_requests_total", "counter", 0, dp)
        if "tgi" in names and i == 0:
            add("tgi_batch_current_size", "gauge", running, "")
            add("tgi_queue_size", "gauge", waiting, "")
    lines = [line for name, (kind, samples) in families.items() for line in (f"# TYPE {name} {kind}", *samples)]
    return ("\n".join(lines) + "\n").encode()
