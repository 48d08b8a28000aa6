"""Does holding torch's CPU kernels to AVX2 reproduce, on this CPU, what an AVX2-only CPU computes?

    python benchmarks/numerics_hold.py                 # a table, one row per setting, and a verdict line

scripts/test.sh reruns the numerics tests with ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`` (the
hold, tests/conftest.py ``NUMERICS_HOLDS``), so that CI on an AVX-512 CPU meets the float32 results an AVX2-only
CPU (an AMD EPYC) gives. This script checks that on the CPU it runs on: tiny-llm is built once, at capability
AVX2 (its weights come from ``torch.randn``, which the capability changes: so the weights are an AVX2 CPU's, and
the hashes below can be compared between machines of the same torch version), then one child
process per setting scores the same 18 requests at batch size 1 and 8 (one thread, every input whole, as
tests/eval/test_scoring.py does) and reports the CPU capability torch ran at, a hash of each batch size's
log-likelihoods and the largest gap between them. On the 2-core AMD EPYC of these machines batch 1 and 8 differ
(about 1e-6 absolute); on CPUs where they are bit-identical by default, the hold "reproduces" when they differ
under it. Run on any x86 machine with lmmbench's ``models`` and ``eval`` extras; no GPU needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "ATEN_CPU_CAPABILITY=avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "MKL_ENABLE_INSTRUCTIONS=AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "the hold (both)": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
HELD = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")


def cpu_description() -> str:
    """The CPU's model name and whether it has AVX2 / AVX-512F (from /proc/cpuinfo; '?' where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "?"
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return f"{model} (avx2: {'avx2' in flags}, avx512f: {'avx512f' in flags}, {os.cpu_count()} CPUs)"


def score_in_child() -> dict[str, Any]:
    """In the child: log-likelihoods of 18 requests at batch size 1 and 8; their hashes and largest gap."""
    import torch

    from lmmbench.backends.scoring import InProcessScorer, LLRequest
    from lmmbench.models import load_model

    torch.set_num_threads(1)
    model = load_model("tiny-llm")
    reqs = [LLRequest(f"Sentence number {i} is about", c) for i in range(6) for c in (" cats", " a dog", " x")]
    one = [ll for ll, _ in InProcessScorer(model, batch_size=1, share_context=False).loglikelihood(reqs)]
    eight = [ll for ll, _ in InProcessScorer(model, batch_size=8, share_context=False).loglikelihood(reqs)]
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "batch1_sha1": hashlib.sha1(json.dumps(one).encode()).hexdigest()[:10],
        "batch8_sha1": hashlib.sha1(json.dumps(eight).encode()).hexdigest()[:10],
        "differing": sum(a != b for a, b in zip(one, eight, strict=True)),
        "max_abs_gap": max(abs(a - b) for a, b in zip(one, eight, strict=True)),
    }


def run_setting(env_extra: dict[str, str], home: str) -> dict[str, Any]:
    """One child process under ``env_extra`` (the held variables cleared first); its JSON answer or its error."""
    env = {k: v for k, v in os.environ.items() if k not in HELD}
    env.update(env_extra, LMMBENCH_HOME=home)
    proc = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, env=env,
                          timeout=900)  # fmt: skip
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return answer


def verdict(rows: dict[str, dict[str, Any]]) -> str:
    """What the table shows about the hold, and what it cannot show."""
    base, held = rows["default"], rows["the hold (both)"]
    if "error" in base or "error" in held:
        return "cannot decide: a setting failed to run"
    if base["differing"] and held["differing"]:
        return ("batch 1 and 8 differ here by default already (an AVX2-path CPU): the hold changes nothing this CPU "
                "can show; run this on an AVX-512 CPU to decide whether it reproduces the gap")
    if not base["differing"] and held["differing"]:
        return "the hold reproduces the AVX2 CPUs' batch-size gap on this CPU (bit-identical without it)"
    if not base["differing"] and not held["differing"]:
        changed = base["batch1_sha1"] != held["batch1_sha1"]
        return ("the hold does NOT reproduce the batch-size gap on this CPU (bit-identical with and without it"
                + ("; it does change the bits)" if changed else "; it changes no bit)"))
    return "batch 1 and 8 differ by default but not under the hold: the hold hides the gap on this CPU"


def main() -> int:
    if "--child" in sys.argv:
        print(json.dumps(score_in_child()))
        return 0
    print(f"CPU: {cpu_description()}")
    with tempfile.TemporaryDirectory(prefix="numerics-hold-") as home:
        env = {k: v for k, v in os.environ.items() if k not in HELD}
        subprocess.run([sys.executable, "-m", "lmmbench.cli.main", "models", "build", "tiny-llm"], check=True,
                       env={**env, "LMMBENCH_HOME": home, "ATEN_CPU_CAPABILITY": "avx2"}, capture_output=True,
                       timeout=900)  # fmt: skip
        rows = {name: run_setting(extra, home) for name, extra in SETTINGS.items()}
    print(f"{'setting':32s} {'capability':10s} {'batch 1':10s} {'batch 8':10s} differing  max |gap|")
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:32s} error: {row['error']}")
            continue
        print(f"{name:32s} {row['capability']:10s} {row['batch1_sha1']:10s} {row['batch8_sha1']:10s} "
              f"{row['differing']:>3d} of 18  {row['max_abs_gap']:.3g}")
    print(f"verdict: {verdict(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
