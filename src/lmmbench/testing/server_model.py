"""What the test server models beyond fixed delays: a prefix cache (TTFT = ``ttft_ms`` +
uncached prompt tokens x ``prefill_ms_per_token``) and a Prometheus ``/metrics`` page under the
names vLLM, SGLang and TGI use, so scraping and prefix-cache workloads are tested end to end.

Prompt tokens are whitespace words (the test server's tokenizer). The cache holds full blocks of
``prefix_block_tokens`` words, each keyed by the hash of everything before it (as vLLM's prefix
caching keys blocks), least recently used first out once ``kv_capacity_tokens`` is full.
"""

from __future__ import annotations

from collections import OrderedDict

from lmmbench.config.perf_testserver import TestServerConfig

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


def render_metrics(cfg: TestServerConfig, cache: PrefixCacheModel, running: int, waiting: int) -> bytes:
    """The Prometheus text page, with the metric names of ``cfg.metrics_names``."""
    usage = min(cache.active_tokens / max(cfg.kv_capacity_tokens, 1), 1.0)
    hit_rate = cache.hit_tokens / cache.query_tokens if cache.query_tokens else 0.0
    label = f'{{model_name="{cfg.model}"}}'
    lines: list[str] = []

    def add(name: str, kind: str, value: float, labels: str = label) -> None:
        lines.extend([f"# TYPE {name} {kind}", f"{name}{labels} {value}"])

    names = ("vllm", "sglang", "tgi") if cfg.metrics_names == "all" else (cfg.metrics_names,)
    if "vllm" in names:
        add("vllm:num_requests_running", "gauge", running)
        add("vllm:num_requests_waiting", "gauge", waiting)
        add("vllm:kv_cache_usage_perc", "gauge", usage)
        add("vllm:prefix_cache_queries_total", "counter", cache.query_tokens)
        add("vllm:prefix_cache_hits_total", "counter", cache.hit_tokens)
    if "sglang" in names:
        add("sglang:num_running_reqs", "gauge", running)
        add("sglang:num_queue_reqs", "gauge", waiting)
        add("sglang:token_usage", "gauge", usage)
        add("sglang:cache_hit_rate", "gauge", hit_rate)
    if "tgi" in names:
        add("tgi_batch_current_size", "gauge", running, "")
        add("tgi_queue_size", "gauge", waiting, "")
    return ("\n".join(lines) + "\n").encode()
