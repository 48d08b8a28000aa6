"""The lm-evaluation-harness half of the cross-check, run with the lm-eval virtualenv's python.

    <lm-eval-python> benchmarks/lmeval_side.py SPEC.json OUT.json

SPEC.json: {"model_dir": ..., "tasks_dir": <folder of lm-eval task YAMLs>, "tasks": [...],
"batch_size": 1}. Runs ``lm_eval.simple_evaluate`` with the HF backend in float32 on CPU and writes
per-sample responses (log-likelihoods, rolling log-likelihoods, generations), the prompts lm-eval
built, the aggregate metrics and the wall time. Imports nothing from lmmbench.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> int:
    t0 = time.perf_counter_ns()
    with open(sys.argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    # every heavy import before the clock starts, so evaluate_s is comparable to lmmbench's in-process time
    import datasets  # noqa: F401
    import lm_eval
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from lm_eval.models.huggingface import HFLM  # noqa: F401
    from lm_eval.tasks import TaskManager

    t_import = time.perf_counter_ns()
    if spec.get("cwd"):  # lm-eval's `datasets` resolves relative data_files against the working directory
        os.chdir(spec["cwd"])
    tm = TaskManager(include_path=spec["tasks_dir"], include_defaults=False)
    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={spec['model_dir']},dtype=float32",
        tasks=spec["tasks"],
        batch_size=spec.get("batch_size", 1),
        device="cpu",
        log_samples=True,
        task_manager=tm,
        random_seed=0,
        numpy_random_seed=1234,
        torch_random_seed=1234,
        fewshot_random_seed=1234,
        bootstrap_iters=int(spec.get("bootstrap_iters", 0)),
        apply_chat_template=bool(spec.get("apply_chat_template", False)),
    )
    t_end = time.perf_counter_ns()
    assert res is not None
    out: dict[str, Any] = {"results": {}, "samples": {}, "versions": {}}
    for task, metrics in res["results"].items():
        out["results"][task] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    for task, samples in res["samples"].items():
        rows = []
        for s in samples:
            rows.append(
                {
                    "doc_id": s["doc_id"],
                    "arguments": [list(a) if isinstance(a, (list, tuple)) else a for a in s["arguments"]],
                    "resps": s["resps"],
                    "filtered_resps": s["filtered_resps"],
                    "filter": s.get("filter", "none"),
                }
            )
        out["samples"][task] = rows
    out["wall_s"] = (t_end - t0) / 1e9
    out["import_s"] = (t_import - t0) / 1e9
    out["evaluate_s"] = (t_end - t_import) / 1e9
    out["lm_eval_version"] = getattr(lm_eval, "__version__", "?")
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(out, fh, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
