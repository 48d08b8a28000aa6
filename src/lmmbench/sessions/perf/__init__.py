"""`lmmbench perf`: load points, servers per group, resume, search, quality under load, ByteMLPerf workloads."""
