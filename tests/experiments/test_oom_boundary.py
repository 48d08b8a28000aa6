"""oom-boundary: the search against injected ground truth, CUDA out-of-memory recovery (mocked_gpu), the
CPU peak-memory probe, and a short real run against a budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lmmbench.profiling.peak_memory import CpuPeakMemory, CudaPeakMemory, is_oom_error
from lmmbench.specs.oom_boundary import OOMBoundaryOptions, Probe, bisect_boundary


def _threshold_probe(limit_s: float, calls: list[float]) -> Any:
    def probe(s: float) -> Probe:
        calls.append(s)
        return Probe(s, s <= limit_s, used_mb=10 * s, total_tokens=int(100 * s))
    return probe


@pytest.mark.parametrize("limit_s", [37.0, 5.0, 130.0])
def test_bisection_finds_the_boundary_within_resolution(limit_s: float) -> None:
    calls: list[float] = []
    res = bisect_boundary(_threshold_probe(limit_s, calls), start_s=4, max_s=600, resolution_s=2)
    assert res.boundary is not None and res.first_fail is not None
    assert res.boundary.seconds <= limit_s < res.first_fail.seconds
    assert res.first_fail.seconds - res.boundary.seconds <= 2
    assert len(calls) == len(set(calls))  # never probes the same length twice
    assert len(calls) <= 14  # doublings + log2(range / resolution)


def test_bisection_when_even_the_start_does_not_fit_or_everything_fits() -> None:
    res = bisect_boundary(_threshold_probe(1.0, []), start_s=4, max_s=600, resolution_s=2)
    assert res.boundary is None and res.first_fail is not None and res.first_fail.seconds == 2
    res = bisect_boundary(_threshold_probe(1e9, []), start_s=4, max_s=50, resolution_s=2)
    assert res.first_fail is None and res.boundary is not None and res.boundary.seconds == 50


def test_is_oom_error() -> None:
    import torch

    assert is_oom_error(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom_error(MemoryError())
    assert is_oom_error(RuntimeError("[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory"))
    assert not is_oom_error(ValueError("bad shape"))


class _FakeCuda:
    """Stands in for torch.cuda: an allocator with a capacity; records what the probe calls."""

    def __init__(self, capacity_mb: float) -> None:
        self.capacity = capacity_mb * 2**20
        self.allocated = 100 * 2**20  # weights
        self.peak = self.allocated
        self.calls: list[str] = []

    def alloc(self, mb: float) -> None:
        import torch

        if self.allocated + mb * 2**20 > self.capacity:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {mb} MiB")
        self.peak = max(self.peak, self.allocated + mb * 2**20)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        def rec(name: str, ret: Any = None) -> Any:
            def fn(*_a: Any, **_k: Any) -> Any:
                self.calls.append(name)
                return ret() if callable(ret) else ret
            return fn

        def reset() -> None:
            self.calls.append("reset_peak_memory_stats")
            self.peak = self.allocated

        monkeypatch.setattr(torch.cuda, "synchronize", rec("synchronize"))
        monkeypatch.setattr(torch.cuda, "empty_cache", rec("empty_cache"))
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *_a: reset())
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_a: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *_a: self.peak)


def test_mocked_gpu_oom_is_caught_and_the_search_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeCuda(capacity_mb=1000)
    fake.install(monkeypatch)
    mem = CudaPeakMemory("cuda")

    def probe(s: float) -> Probe:
        m = mem.measure(lambda: fake.alloc(20 * s))  # 20 MB per second of video on top of 100 MB weights
        # after every measurement, OOM or not, the cache was emptied
        assert fake.calls[-1] == "empty_cache"
        return Probe(s, not m.oom, used_mb=m.peak_mb, reason=m.reason)

    res = bisect_boundary(probe, start_s=4, max_s=600, resolution_s=2)
    assert res.boundary is not None and res.first_fail is not None
    assert res.boundary.seconds == 44 and res.first_fail.seconds == 46  # 100 + 20 s <= 1000 MB
    assert res.first_fail.reason.startswith("cuda_oom")
    assert res.boundary.used_mb == pytest.approx(100 + 20 * 44)
    ooms = sum(1 for p in res.probes if not p.fits)
    assert ooms >= 2
    assert fake.calls.count("reset_peak_memory_stats") == len(res.probes)


def test_mocked_gpu_other_errors_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    _FakeCuda(1000).install(monkeypatch)

    def boom() -> None:
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError):
        CudaPeakMemory("cuda").measure(boom)


def test_cpu_peak_memory_sees_a_torch_allocation() -> None:
    import torch

    mem = CpuPeakMemory()

    def allocate() -> float:
        t = torch.ones(64 * 2**20 // 4)  # 64 MB, freed on return
        return float(t[0])

    m = mem.measure(allocate)
    assert not m.oom and m.result == 1.0
    assert 60 <= m.growth_mb <= 200


def test_short_cpu_run_against_a_budget(tmp_path: Path) -> None:
    from lmmbench.sessions.spec_session import run_spec
    from lmmbench.specs.oom_boundary import OOMBoundarySpec

    opts = OOMBoundaryOptions(out_dir=tmp_path, memory_budget_gb=0.07, frame_size=56, start_s=2, max_s=64,
                              resolution_s=2, warmup=1, progress=False)
    spec_dir = run_spec(OOMBoundarySpec.name, opts).spec_dir
    analysis = json.loads((spec_dir / "oom-boundary_analysis.json").read_text())
    assert analysis["rows_ok"] == 1
    budget = 0.07 * 1024
    assert analysis["budget_mb"] == pytest.approx(budget)
    assert analysis["boundary_s"] > 0 and analysis["boundary_used_mb"] <= budget
    assert analysis["first_fail_s"] - analysis["boundary_s"] <= 2
    probes = (spec_dir / "oom-boundary_probes.csv").read_text().splitlines()
    assert len(probes) - 1 == analysis["n_probes"] >= 3
    assert {line.split(",")[0] for line in probes[1:]} == {"1"}  # the warm-up search's probes are not kept
    assert (spec_dir / "oom-boundary_plot.png").is_file()


def test_findings_when_everything_fits() -> None:
    from lmmbench.specs.oom_boundary import oom_findings

    rows = [{"status": "ok", "boundary_s": 16, "boundary_tokens": 2356, "boundary_used_mb": 62,
             "first_fail_s": float("nan"), "first_fail_reason": "none: max_s fits", "budget_mb": 153.6}]
    probes = [{"fits": "True", "total_tokens": t, "used_mb": 10 + t / 100} for t in (500, 1000, 2000)]
    out = oom_findings(rows, probes)
    assert "raise --max-s" in out["finding"]
    assert out["mb_per_token"] == pytest.approx(0.01)
    assert out["predicted_tokens_at_budget"] == pytest.approx((153.6 - 10) / 0.01)
