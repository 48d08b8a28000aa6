"""A sample third-party spec: time summing N integers (no model), registered by entry point."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from pydantic import Field

from lmmbench.specs.base import Case, RunOptions, Spec, SpecContext


class SumOptions(RunOptions):
    """Options of plugin-sum: the sizes to sum."""

    sizes: list[int] = Field(default_factory=lambda: [1000, 10000], description="How many integers to sum.")


class SumSpec(Spec):
    """Time ``sum(range(n))`` for each size (a stand-in for a plugin's real experiment)."""

    name: ClassVar[str] = "plugin-sum"
    help: ClassVar[str] = "Sample plugin spec: time sum(range(n))."
    options_model: ClassVar[type[RunOptions]] = SumOptions
    columns: ClassVar[tuple[str, ...]] = ("n", "sum_ms", "ttft_ms")
    stage_fields: ClassVar[tuple[str, ...]] = ("sum_ms",)

    def setup(self, ctx: SpecContext) -> list[Case]:
        """One case per size."""
        opts = ctx.options
        assert isinstance(opts, SumOptions)
        return [Case(id=f"n{n}", params={"n": n}) for n in opts.sizes]

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        """Sum once, timed."""
        n = int(case.params["n"])
        t0 = time.perf_counter_ns()
        total = sum(range(n))
        ms = (time.perf_counter_ns() - t0) / 1e6
        assert total == n * (n - 1) // 2
        return {"n": n, "sum_ms": ms, "ttft_ms": ms}
