"""Shared test fixtures: an isolated LMMBENCH_HOME and free loopback ports; which tests must run alone.

``scripts/test.sh`` runs the tests in two passes: everything not marked ``serial`` on two pytest-xdist
workers, then the ``serial`` ones one at a time. A test is ``serial`` when it times something against an
injected or expected ground truth (TTFT, lateness, rates, speed-ups, deadlines): a second worker beside it
would be load it did not ask for. The modules below are marked here, whole, so a new timing test in them is
serial without anyone remembering to mark it; elsewhere, mark one with ``@pytest.mark.serial``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.core.net import free_loopback_port


@pytest.fixture(scope="session", autouse=True)
def lmmbench_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test session builds its tiny models under a fresh LMMBENCH_HOME."""
    home = tmp_path_factory.mktemp("lmmbench_home")
    old = os.environ.get("LMMBENCH_HOME")
    os.environ["LMMBENCH_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("LMMBENCH_HOME", None)
    else:
        os.environ["LMMBENCH_HOME"] = old


#: Test modules (or folders) that time things against a ground truth: run alone, never beside another worker.
SERIAL_PATHS = (
    "perf/test_fidelity.py", "perf/test_perf_cli.py", "perf/test_workloads.py", "perf/test_journal.py",
    "perf/test_exit_codes.py", "perf/test_vllm_compat.py", "perf/test_bench_serve.py", "perf/test_bench_sglang.py",
    "perf/test_bench_sglang_requests.py",  # non-streamed TTFT against the injected TTFT / ITL
    "plans/test_timing_rows.py",  # two workers' sleeps must overlap
    "runs/test_runs_compare.py", "runs/test_previous_run.py",  # verdicts on injected 20 / 26 / 30 ms TTFT
    "reliability/test_lifecycle.py", "reliability/test_perf_search_and_recover.py",  # signals, lateness
    "plans/test_equivalence.py", "plans/test_ray.py", "plans/test_worker_pool.py",
    "experiments/test_backend_comparison.py", "episodes/test_episodes_toy_waypoints.py",
    "episodes/test_episodic_eval_spec.py", "ttft/test_run.py", "serve/test_serve_overload.py", "benchmarks/",
)  # fmt: skip


#: Test modules that compare floats computed through different batch sizes, shapes or kernels (within
#: ``float_tolerance.F32_SPREAD_REL`` times a stated factor), or against numbers another machine wrote: marked
#: ``numerics``, and run again by scripts/test.sh with torch's CPU kernels held to AVX2 (``numerics_hold``).
NUMERICS_PATHS = (
    "eval/test_scoring.py", "eval/test_context_sharing.py", "eval/test_read_positions.py",
    "eval/test_lmeval_tasks.py", "serve/test_serve_engine.py", "episodes/test_episodes_toy_waypoints.py",
)  # fmt: skip

#: The settings scripts/test.sh's numerics pass runs under (LMMBENCH_NUMERICS_HOLD=avx2): ATEN_CPU_CAPABILITY
#: picks aten's own vectorised kernels (softmax, layer norm, attention, random fills), MKL_ENABLE_INSTRUCTIONS the
#: matrix kernels MKL dispatches to on Intel CPUs. Measured with torch 2.13 on an AVX2 AMD EPYC: ATEN_CPU_CAPABILITY
#: =default changes log_softmax / layer_norm / sdpa bits but not mm; MKL_CBWR=COMPATIBLE changes mm (MKL computes
#: it); MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA change nothing there (MKL dispatches by vendor on AMD; oneDNN
#: is not on float32 eager matmul). ATEN_CPU_CAPABILITY=avx512 on that CPU dies of SIGILL: torch does not check.
NUMERICS_HOLDS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "serial: times something against a ground truth; never beside another worker")
    config.addinivalue_line("markers", "docs: runs the documented bash blocks (scripts/test.sh's docs leg only)")
    config.addinivalue_line(
        "markers",
        "peer_heavy: needs a peer's venv of gigabytes (lerobot's: 8.5 GB, 4 GB downloaded, minutes); not in "
        "scripts/test.sh's passes, run by hand: .venv/bin/python -m pytest -m peer_heavy",
    )
    config.addinivalue_line(
        "markers", "numerics: float results across batch sizes / kernels; run again with kernels held to AVX2"
    )
    _check_numerics_hold()


def _check_numerics_hold() -> None:
    """Under ``LMMBENCH_NUMERICS_HOLD`` the environment must carry that hold's settings and torch must run at that
    capability: a pass that believed it was held to AVX2 while it was not would prove nothing."""
    hold = os.environ.get("LMMBENCH_NUMERICS_HOLD")
    if not hold:
        return
    if hold not in NUMERICS_HOLDS:
        raise pytest.UsageError(f"LMMBENCH_NUMERICS_HOLD={hold}: known holds are {sorted(NUMERICS_HOLDS)}")
    wrong = {k: os.environ.get(k) for k, v in NUMERICS_HOLDS[hold].items() if os.environ.get(k) != v}
    if wrong:
        raise pytest.UsageError(f"LMMBENCH_NUMERICS_HOLD={hold} but {wrong}: want {NUMERICS_HOLDS[hold]}")
    import torch

    got = torch.backends.cpu.get_cpu_capability()
    if got != hold.upper():
        raise pytest.UsageError(f"LMMBENCH_NUMERICS_HOLD={hold} but torch runs at CPU capability {got}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of ``SERIAL_PATHS`` ``serial`` and every test of ``NUMERICS_PATHS`` ``numerics``."""
    root = Path(__file__).parent
    for item in items:
        rel = Path(str(item.fspath)).relative_to(root).as_posix() if str(item.fspath).startswith(str(root)) else ""
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)
        if rel in NUMERICS_PATHS:
            item.add_marker(pytest.mark.numerics)


free_port = free_loopback_port


@pytest.fixture(autouse=True)
def limits_restored() -> Iterator[None]:
    """``main(["--limit", ...])`` sets ``LMMBENCH_LIMIT_*`` for its process and children, as it should for a user;
    in-process tests would leak it into every later test of the worker: each test gets the variables back as
    they were."""
    before = {k: v for k, v in os.environ.items() if k.startswith("LMMBENCH_LIMIT_")}
    yield
    for key in [k for k in os.environ if k.startswith("LMMBENCH_LIMIT_")]:
        if key not in before:
            del os.environ[key]
    os.environ.update(before)


@pytest.fixture
def port() -> int:
    """A free loopback port chosen at run time."""
    return free_port()


def _descendants() -> dict[int, str]:
    """Live (non-zombie) descendant processes of this one: pid -> command line (psutil, else /proc)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    out: dict[int, str] = {}
    if psutil is not None:
        for p in psutil.Process().children(recursive=True):
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out[p.pid] = " ".join(p.cmdline())[:200]
            except psutil.Error:
                continue
        return out
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    todo = [os.getpid()]
    while todo:
        for kid in parents.get(todo.pop(), []):
            todo.append(kid)
            try:
                out[kid] = (Path("/proc") / str(kid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            except OSError:
                out[kid] = "?"
    return out


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail any test that leaves a child process alive it started (after 3 s of grace); the leak is ended."""
    import signal
    import time

    before = set(_descendants())
    yield
    deadline = time.monotonic() + 3.0
    while True:
        leaked = {pid: cmd for pid, cmd in _descendants().items()
                  if pid not in before and "resource_tracker" not in cmd}  # fmt: skip
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in leaked:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if leaked:
        pytest.fail(f"the test left {len(leaked)} child process(es) alive: {leaked}")
