"""Hook overhead: median TTFT with stage hooks / without hooks on a built-in model (target <= 1.03).

Usage: .venv/bin/python benchmarks/hook_overhead.py [--model tiny-omni] [--rounds 30] [--threads 1]

Each round measures every sample of the synthetic set in two blocks, one with the stage hooks
installed and active and one with them removed (block order alternating between rounds, so drift
and bursts of load on a shared machine hit both arms alike). TTFT is the same quantity in both arms: input
transfer + generate(max_new_tokens=1). Prints a JSON report; --out writes it to a file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-omni")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch

    from lmmbench.core.environment import capture_environment
    from lmmbench.engines.breakdown import run_generate_with_breakdown
    from lmmbench.engines.inprocess_breakdown import InProcessBreakdown, SampleMedia
    from lmmbench.media.manifest import load_manifest
    from lmmbench.models import load_model
    from lmmbench.profiling.hooks import StageHooks
    from lmmbench.specs.ttft_breakdown import synthetic_manifest

    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    eng = InProcessBreakdown(loaded, hooks=False)
    samples: dict[str, Any] = {}
    for row in load_manifest(synthetic_manifest(args.seed)):
        media = SampleMedia(prompt=row.prompt, video=row.video, image=row.image, audio=row.audio)
        samples[row.id] = eng.pack(media, eng.extract(media)).inputs
    hooks = StageHooks(loaded.model, loaded.ref.family)

    def ttft(inputs: Any, with_hooks: bool) -> float:
        res = run_generate_with_breakdown(loaded.model, inputs, loaded.device, hooks if with_hooks else None)
        return float(res.fields["ttft_ms"])

    times: dict[str, dict[bool, list[float]]] = {sid: {True: [], False: []} for sid in samples}
    for rnd in range(args.warmup + args.rounds):
        for arm in (True, False) if rnd % 2 == 0 else (False, True):
            if arm:
                hooks.install()  # installed for a whole block: install / remove stay outside every measurement
            for sid, inputs in samples.items():
                t = ttft(inputs, arm)
                if rnd >= args.warmup:
                    times[sid][arm].append(t)
            if arm:
                hooks.remove()
    per_sample = {}
    for sid, arms in times.items():
        on, off = statistics.median(arms[True]), statistics.median(arms[False])
        per_sample[sid] = {
            "ttft_ms_p50_hooks": on,
            "ttft_ms_p50_no_hooks": off,
            "ratio": on / off,
            "ratio_of_minimums": min(arms[True]) / min(arms[False]),
        }
    all_on = statistics.median([t for a in times.values() for t in a[True]])
    all_off = statistics.median([t for a in times.values() for t in a[False]])
    ratios = [v["ratio"] for v in per_sample.values()]
    report = {
        "model": args.model,
        "rounds": args.rounds,
        "threads": args.threads,
        "median_ratio_over_samples": statistics.median(ratios),
        "ratio_of_medians_all": all_on / all_off,
        "max_ratio_per_sample": max(ratios),
        "median_ratio_of_minimums": statistics.median(v["ratio_of_minimums"] for v in per_sample.values()),
        "target": 1.03,
        "per_sample": per_sample,
        "environment": {
            k: v for k, v in capture_environment().items() if k in ("cpu", "cpu_count", "libraries", "git")
        },
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
