"""What a ByteMLPerf workload decides beside its load points, as ByteMLPerf's launcher (``llm_perf/launch.py``)
runs it: which tp sizes are real (a server per point from ``--server-cmd``, one per tp with ``--server-per-tp``,
or ``--tp-label-only`` stated in every row), whether load is sent at all (``test_perf``), the accuracy step
(``test_accuracy``: first, at ``min_tp_size`` and batch 1, on a server of its own), and the model served."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.config.perf.bytemlperf import ByteMLPerfWorkload
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.workload_file import bytemlperf_root, bytemlperf_version, bytemlperf_workload, dataset_path
from lmmbench.core.errors import UserError
from lmmbench.reports.bytemlperf_header import LAUNCHER_NEW_TOKENS, ReportHeader

__all__ = ["SERVER_PER_TP", "TP_LABEL_ONLY", "WorkloadPlan", "check_tp_sizes", "configure_header", "run_accuracy",
           "served_model", "workload_plan"]  # fmt: skip

#: The label every row of a ``--tp-label-only`` run carries.
TP_LABEL_ONLY = "label only: the one server at --url measured under every tp size"
#: What report.json and run.json say of ``--server-per-tp``.
SERVER_PER_TP = ("one server per tp size, {batch} its largest batch (--server-per-tp, a speed-up): not "
                 "ByteMLPerf's launcher, which starts a fresh server per point with {batch} that point's batch")


@dataclass(frozen=True)
class WorkloadPlan:
    """A ByteMLPerf workload and what this run does with it."""

    workload: ByteMLPerfWorkload
    run_accuracy: bool  # test_accuracy with a --reference: the accuracy step runs, first
    accuracy_skipped: str | None  # why test_accuracy: true does not run (no --reference), else None
    servers: str  # how servers start: "per point" (ByteMLPerf's launcher), SERVER_PER_TP, or "none (--url)"


def _no_reference_line(wl: ByteMLPerfWorkload) -> str:
    data = wl.dataset or "<the workload's dataset>"
    return (f"{wl.path}: test_accuracy: true needs --reference DIR, made by `lmmbench reference dump --model "
            f"{wl.model or 'MODEL'} --prompts {data} --out DIR`")  # fmt: skip


def workload_plan(base: PerfConfig) -> WorkloadPlan | None:
    """The plan of ``--workload`` when it is ByteMLPerf's (None otherwise), decided before any server starts:
    ``test_accuracy`` without ``--reference`` runs the perf points and says so in one line (or, with
    ``test_perf`` false, is refused: nothing would run)."""
    wl = bytemlperf_workload(base.workload) if base.workload is not None else None
    if wl is None:
        for flag, given in (("--reference", base.reference), ("--server-per-tp", base.server_per_tp)):
            if given:
                raise UserError(f"{flag}: only a ByteMLPerf workload uses it; drop it")
        return None
    if base.reference is not None and not wl.test_accuracy:
        raise UserError(f"--reference: {wl.path} has test_accuracy false, so nothing uses it; drop it")
    if base.server_per_tp and base.server_cmd is None:
        raise UserError("--server-per-tp: only with --server-cmd (it decides how servers are started); drop it")
    skipped = None
    if wl.test_accuracy and base.reference is None:
        if not wl.test_perf:
            raise UserError(_no_reference_line(wl) + "; test_perf is false, so nothing would run")
        skipped = _no_reference_line(wl) + "; without it only the perf points run, Accuracy is null"
        print(f"[perf] {skipped}", file=sys.stderr)
    if wl.test_accuracy and base.reference is not None:
        _check_reference(base.reference, wl)
    servers = "none (the server at --url)" if base.server_cmd is None else (
        SERVER_PER_TP if base.server_per_tp else "a fresh server per point and for the accuracy run, {batch} that "
        "point's batch (ByteMLPerf's launcher)")  # fmt: skip
    return WorkloadPlan(wl, wl.test_accuracy and base.reference is not None, skipped, servers)


def _check_reference(reference: Path, wl: ByteMLPerfWorkload) -> None:
    """The reference must hold the first prompts of the workload's dataset, in ByteMLPerf's template, generated
    for ``accuracy_config.max_new_tokens`` steps (every step greedy, end-of-sequence ignored: this meets any
    ``min_new_tokens`` up to it, where ByteMLPerf's server may stop at end-of-sequence after ``min_new_tokens``)."""
    from lmmbench.evaluation.reference.run import load_prompts, read_reference

    meta, _first = read_reference(reference)
    steps = int(meta["max_new_tokens"])
    if wl.layout == "nested" and wl.max_new_tokens is not None and steps != wl.max_new_tokens:
        raise UserError(f"--reference {reference}: dumped with --max-new-tokens {steps}, but the workload's "
                        f"accuracy_config.max_new_tokens is {wl.max_new_tokens}; dump it with --max-new-tokens "
                        f"{wl.max_new_tokens}")  # fmt: skip
    if wl.dataset is None:
        return
    path = dataset_path(wl)
    want = load_prompts(str(path), len(meta["prompts"]))
    if [p["prompt"] for p in meta["prompts"]] != want:
        raise UserError(f"--reference {reference}: its prompts are not the first {len(meta['prompts'])} of "
                        f"the workload's dataset {path}; dump it with --prompts {path}")  # fmt: skip


def served_model(base: PerfConfig, plan: WorkloadPlan | None, served: list[str] | None) -> PerfConfig:
    """``base`` measuring the workload's ``model`` when ``--model`` is not given: the served id that is it (exactly,
    or as the last part of a hub id) when ``served`` lists the server's models, else that name as the workload
    writes it (a started server is then checked for it). A server that does not serve it: one line naming what
    it serves."""
    if plan is None or base.model is not None or plan.workload.model is None:
        return base
    want = plan.workload.model
    if served is None:
        return base.model_copy(update={"model": want})
    match = [m for m in served if m == want] or [m for m in served if m.rsplit("/", 1)[-1] == want]
    if not match:
        raise UserError(f"{plan.workload.path}: model '{want}' is not served at {base.url} (it serves: "
                        f"{', '.join(served) or 'nothing'}); pass --model with the served id")  # fmt: skip
    return base.model_copy(update={"model": match[0]})


def configure_header(header: ReportHeader, base: PerfConfig, plan: WorkloadPlan | None) -> None:
    """report.json's top for this run (ByteMLPerf's reporter's meanings; lmmbench's facts under its own key)."""
    header.hardware_type = base.hardware_type
    if plan is None:
        return
    wl = plan.workload
    header.task = wl.task
    header.version = bytemlperf_version(bytemlperf_root(wl.path))
    header.perf_tested = wl.test_perf
    header.new_tokens = LAUNCHER_NEW_TOKENS if wl.layout == "nested" else (wl.min_new_tokens, wl.max_new_tokens)
    header.facts.update(workload_file=str(wl.path), workload_layout=wl.layout, workload_model=wl.model,
                        servers=plan.servers, accuracy_skipped=plan.accuracy_skipped)  # fmt: skip


def run_accuracy(base: PerfConfig, plan: WorkloadPlan, run_dir: Path) -> dict[str, Any]:
    """ByteMLPerf's accuracy step against the server under test, at ``min_tp_size`` / batch 1 (a server of its own
    when ``--server-cmd`` starts them): the Accuracy section of report.json, its files in ``run_dir``."""
    from lmmbench.evaluation.reference.run import http_accuracy
    from lmmbench.sessions.perf.server import start_server, stop_server, wait_ready

    assert base.reference is not None
    tp = plan.workload.accuracy_tp
    proc = start_server(base, tp, 1) if base.server_cmd else None
    try:
        if proc is not None:
            wait_ready(base, proc)
        print(f"[perf] accuracy (tp {tp}, batch 1): {base.url} against the reference {base.reference}",
              file=sys.stderr)  # fmt: skip
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
