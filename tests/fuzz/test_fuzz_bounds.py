"""The unbounded-input cases, each in a subprocess under a memory limit (RLIMIT_AS) and a time limit:
a missing bound makes the case fail (MemoryError, killed, or timed out) instead of hanging the suite."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

MEMORY_LIMIT_BYTES = 3 * 1024**3  # address space: enough for torch's import, far below a 1 GB string x copies

PERF = ["perf", "--url", "{url}", "--num-requests", "2", "--no-plots", "--no-progress", "--out-dir", "{out}"]
CASES: list[tuple[str, list[str], str]] = [
    ("concurrency-1e9", [*PERF, "--concurrency", "1000000000"], "limit concurrency"),
    ("input-tokens-1e12", [*PERF, "--input-tokens", "1000000000000"], "limit input_tokens"),
    ("output-tokens-1e12", [*PERF, "--output-tokens", "1000000000000"], "limit output_tokens"),
    ("workload-batch-1e9", [*PERF, "--workload", "{c:huge_batches.json}"], "limit batch_size"),
    ("workload-alias-bomb", [*PERF, "--workload", "{c:alias_bomb.yaml}"], "expands to"),
    ("config-alias-bomb", [*PERF, "--config", "{c:alias_bomb.yaml}"], "expands to"),
    ("template-1gb-string", ["eval", "--model", "tiny-llm", "--tasks", "{c:task_huge_string.yaml}",
                             "--out-dir", "{out}"], "limit prompt_chars"),
]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("case", "argv", "expect"), CASES, ids=[c[0] for c in CASES])
def test_unbounded_input_fails_fast_under_a_memory_limit(
    case: str, argv: list[str], expect: str, corpus: dict[str, Path], fuzz_url: str, tmp_path: Path
) -> None:
    args = []
    for a in argv:
        for name, path in corpus.items():
            a = a.replace(f"{{c:{name}}}", str(path))
        args.append(a.replace("{url}", fuzz_url).replace("{out}", str(tmp_path / "out")))
    proc = subprocess.run([sys.executable, "-m", "lmmbench.cli.main", *args], capture_output=True, text=True,
                          timeout=120, preexec_fn=_limit_memory, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, f"{case}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert expect in proc.stderr, proc.stderr[-2000:]
    out = tmp_path / "out"
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.exists() else 0
    assert size < 1_000_000, f"{case} wrote {size} bytes"
