"""`lmmbench proxy`: the measuring proxy in front of any OpenAI-compatible engine."""
