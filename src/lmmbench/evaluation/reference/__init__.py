"""ByteMLPerf's accuracy check: reference dump and compare (perplexity, logits diff, token diff)."""
