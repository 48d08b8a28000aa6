"""SGLang's `bench_serving` data sets, as SGLang draws them."""
