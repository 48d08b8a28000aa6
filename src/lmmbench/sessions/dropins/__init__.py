"""The drop-ins: vLLM's `bench serve` (`vllm_*`) and SGLang's `bench_serving` (`sglang_*`) as lmmbench runs them."""
