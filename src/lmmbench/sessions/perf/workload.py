"""What a ByteMLPerf workload decides beside its load points: which tp sizes are real (a server per tp
size from ``--server-cmd``, or ``--tp-label-only`` stated in every row), whether load is sent at all
(``test_perf``), and the accuracy check (``test_accuracy``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.workload_file import ByteMLPerfFlags, bytemlperf_flags
from lmmbench.core.errors import UserError

__all__ = ["TP_LABEL_ONLY", "check_tp_sizes", "run_accuracy", "workload_flags"]

#: The label every row of a ``--tp-label-only`` run carries.
TP_LABEL_ONLY = "label only: the one server at --url measured under every tp size"


def workload_flags(base: PerfConfig) -> ByteMLPerfFlags | None:
    """The ByteMLPerf flags of ``--workload`` (None without one, or for lmmbench YAML); refuses a workload that
    asks for nothing."""
    flags = bytemlperf_flags(base.workload) if base.workload is not None else None
    if flags is not None and not flags.test_perf and not flags.test_accuracy:
        raise UserError(f"{base.workload}: test_perf and test_accuracy are both false: nothing to run")
    if base.reference is not None and (flags is None or not flags.test_accuracy):
        raise UserError("--reference: only a ByteMLPerf workload with test_accuracy: true uses it; drop it")
    if flags is not None and flags.test_accuracy:
        _check_reference(base, flags)
    return flags


def _dataset_path(workload: Path, dataset: str) -> Path | None:
    """The workload's dataset: relative to the workload file's folder, else to the working directory."""
    for p in (workload.parent / dataset, Path(dataset)):
        if p.expanduser().is_file():
            return p.expanduser()
    return None


def _check_reference(base: PerfConfig, flags: ByteMLPerfFlags) -> None:
    """test_accuracy needs a reference, dumped from the workload's dataset when it names one."""
    from lmmbench.evaluation.reference.run import load_prompts, read_reference

    if base.reference is None:
        raise UserError(f"{base.workload}: test_accuracy: true needs --reference DIR, a `lmmbench reference dump "
                        "--prompts <the workload's dataset>` of the model (ByteMLPerf's reference "
                        "outputs)")  # fmt: skip
    meta, _first = read_reference(base.reference)
    if flags.dataset is None:
        return
    assert base.workload is not None
    path = _dataset_path(base.workload, flags.dataset)
    if path is None:
        raise UserError(f"{base.workload}: dataset '{flags.dataset}' not found (next to the workload or here)")
    want = load_prompts(str(path), len(meta["prompts"]))
    if [p["prompt"] for p in meta["prompts"]] != want:
        raise UserError(f"--reference {base.reference}: its prompts are not the first {len(meta['prompts'])} of "
                        f"the workload's dataset {path}; dump it with --prompts {path}")  # fmt: skip


def run_accuracy(base: PerfConfig, run_dir: Path) -> dict[str, Any]:
    """ByteMLPerf's accuracy check of the server under test, at tp 1 / batch 1 (a server of its own when
    ``--server-cmd`` starts them): the Accuracy section of report.json, its files in ``run_dir``."""
    from lmmbench.evaluation.reference.run import http_accuracy
    from lmmbench.sessions.perf.server import start_server, stop_server, wait_ready

    assert base.reference is not None
    proc = start_server(base, 1, 1) if base.server_cmd else None
    try:
        if proc is not None:
            wait_ready(base, proc)
        print(f"[perf] accuracy: {base.url} against the reference {base.reference}", file=sys.stderr)
        return http_accuracy(base.url, base.model, base.reference, run_dir, base.api_key)
    finally:
        if proc is not None:
            stop_server(proc)


def check_tp_sizes(base: PerfConfig, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points, refused when several tp sizes would all measure one server (unless ``--tp-label-only``,
    which labels every point with it)."""
    tps = sorted({p.get("labels", {}).get("tp") for p in points} - {None})
    if base.tp_label_only:
        if base.server_cmd is not None:
            raise UserError("--tp-label-only: --server-cmd starts a server per tp size, so tp is not a label; "
                            "drop one of them")  # fmt: skip
        if len(tps) < 2:
            raise UserError("--tp-label-only: the run has fewer than two tp sizes; drop it")
        return [{**p, "labels": {**p.get("labels", {}), "tp_applied": TP_LABEL_ONLY}} for p in points]
    if len(tps) > 1 and base.server_cmd is None:
        raise UserError(f"{base.workload}: tp_sizes {tps} but no --server-cmd to start a server per tp size "
                        "(e.g. --server-cmd 'vllm serve M --tensor-parallel-size {tp} --max-num-seqs {batch} "
                        "--port {port}'); or --tp-label-only to measure the server at --url under each tp "
                        "label")  # fmt: skip
    return points
