"""What a ByteMLPerf workload decides beside its load points: which tp sizes are real (a server per tp
size from ``--server-cmd``, or ``--tp-label-only`` stated in every row), whether load is sent at all
(``test_perf``), and the accuracy check (``test_accuracy``)."""

from __future__ import annotations

from typing import Any

from lmmbench.config.perf import PerfConfig
from lmmbench.config.perf_workload_file import ByteMLPerfFlags, bytemlperf_flags
from lmmbench.core.errors import UserError

__all__ = ["TP_LABEL_ONLY", "check_tp_sizes", "workload_flags"]

#: The label every row of a ``--tp-label-only`` run carries.
TP_LABEL_ONLY = "label only: the one server at --url measured under every tp size"


def workload_flags(base: PerfConfig) -> ByteMLPerfFlags | None:
    """The ByteMLPerf flags of ``--workload`` (None without one, or for lmmbench YAML); refuses a workload that
    asks for nothing."""
    flags = bytemlperf_flags(base.workload) if base.workload is not None else None
    if flags is not None and not flags.test_perf and not flags.test_accuracy:
        raise UserError(f"{base.workload}: test_perf and test_accuracy are both false: nothing to run")
    if flags is not None and flags.test_accuracy:
        raise UserError(f"{base.workload}: test_accuracy: true is not supported yet; set it to false")
    return flags


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
