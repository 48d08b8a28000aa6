"""vLLM's benchmark data sets and samplers, as `vllm bench serve` draws them."""
