"""lmmbench's own load-test data sets: the `PERF_DATASETS` registry, structured data sets, the catalogue."""
