"""`lmmbench eval` as a session: one model, several models (`--models`), and `--mode perf`."""
