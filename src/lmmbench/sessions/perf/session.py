"""A perf run, as a library call (`lmmbench perf`, tests and plan executors call ``run_perf``):
resolve points (sweeps, workloads, search probes), run each, write every file.

Output folder ``<out-dir>/perf/<run-name>/``: records.partial.jsonl (finished requests of the point
in progress, raw instants, appended every 0.5 s by the load workers and removed when the point ends),
records.jsonl / records.csv (full records appended after each point, flushed), summary.csv and
report.json (rewritten after each point, so an interrupted run keeps everything measured),
run.json (the run log: resolved config, environment, how it measured, outcome, headline metrics,
files; written at the start and again at the end, when the run is indexed in the run store), PNG
plots and report.html.

One job per module: ``perf_points`` (points from options and workload files), ``perf_run_dir`` (the
folder: claimed, resumed, cleaned), ``perf_server`` (``--server-cmd`` lifecycle and the sweep),
``perf_telemetry``, ``perf_search`` (``perf search``) and ``reports.perf_files`` (summary.csv,
report.json, run.json); this module runs them in order.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.backends.readiness import wait_for_server
from lmmbench.config.input_files import check_writable_dir, prepare_out_dir
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.clock import wall_label
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest
from lmmbench.core.runs.log import RunLog, RunStatus, measurement_from, new_run_id
from lmmbench.loadgen.api import LoadResult, Preflight, measurement_facts, preflight, run_benchmark
from lmmbench.loadgen.journal import JOURNAL_NAME
from lmmbench.loadgen.search import SearchResult
from lmmbench.loadgen.spec_decode import scrape_spec_decode, spec_decode_keys
from lmmbench.reports.perf_files import PerfFiles
from lmmbench.reports.perf_report import write_json
from lmmbench.sessions.perf.points import check_points, point_labels, resolve_points
from lmmbench.sessions.perf.resume import Previous
from lmmbench.sessions.perf.run_dir import (
    claim_run_dir,
    keep_crashed_journal,
    previous_points,
    previous_status,
    remove_empty_run,
)
from lmmbench.sessions.perf.search import run_search
from lmmbench.sessions.perf.server import check_server_cmd, sweep, wait_ready
from lmmbench.sessions.perf.telemetry import finish_telemetry, start_telemetry
from lmmbench.sessions.perf.workload import (
    WorkloadPlan,
    check_tp_sizes,
    configure_header,
    run_accuracy,
    served_model,
    workload_plan,
)

__all__ = ["PerfRun", "run_perf"]


@dataclass
class PerfRun:
    """What a perf run produced."""

    run_dir: Path
    results: list[LoadResult] = field(default_factory=list)
    search: SearchResult | None = None
    files: list[Path] = field(default_factory=list)
    run_id: str = ""

    def request_counts(self) -> tuple[int, int]:
        """(requests sent, requests that succeeded) over every load point."""
        return (sum(r.summary.requests for r in self.results), sum(r.summary.ok for r in self.results))
    interrupted: bool = False
    already_finished: bool = False  # --resume of a run whose every point was measured: nothing was run
    accuracy: dict[str, Any] | None = None  # ByteMLPerf's Accuracy section, when a workload's test_accuracy ran it


def _server_part(m: Any) -> str:
    """The server-side TTFT and the client − server difference (median, spread), when responses carried them."""
    if "server_ttft_ms" not in m:
        return ""
    out = f", server TTFT p50 {m['server_ttft_ms'].p50:.2f} ms"
    for name, what in (("client_minus_server_ttft_ms", "TTFT"), ("client_minus_server_e2e_ms", "latency")):
        if name in m:
            d = m[name]
            out += f", client-server {what} p50 {d.p50:.2f} ms (std {d.std:.2f}, p90 {d.p90:.2f})"
    return out


def _print_point(labels: dict[str, Any], res: LoadResult) -> None:
    s, m = res.summary, res.summary.metrics
    load = f"rate={labels['rate']:g}/s" if labels.get("rate") is not None else f"conc={labels.get('concurrency')}"
    asked = res.requested_output_tokens  # what was sent, which a data set may set (spec_bench, ShareGPT, traces)
    out: Any = labels.get("output_tokens")
    if asked is not None:
        out = asked[0] if asked[0] == asked[1] else f"{asked[0]}-{asked[1]}"
    print(f"[perf] {load} in={labels.get('input_tokens')} out={out}: "
          f"{s.ok}/{s.requests} ok, QPS {s.qps:.2f}, out tok/s {s.output_token_throughput:.1f}, "
          f"TTFT mean/p99 {m['ttft_ms'].mean:.2f}/{m['ttft_ms'].p99:.2f} ms, "
          f"TPOT {m['tpot_ms'].mean:.2f} ms, ITL {m['itl_ms'].mean:.2f} ms, "
          f"lateness p99 {m['lateness_ms'].p99:.3f} ms" + _server_part(m)
          + (f", errors {s.errors_by_kind}" if s.errors else ""), file=sys.stderr)  # fmt: skip
    for w in res.warnings:
        print(f"[perf] {w}", file=sys.stderr)


def _check_before_measuring(base: PerfConfig, points: list[dict[str, Any]]) -> Any:
    """Everything refusable refused before a folder is made or load is sent; the tokenizer (or None)."""
    if base.action == "search" and not base.slo:
        raise UserError("perf search needs --slo, e.g. --slo ttft_ms=500,tpot_ms=50")
    tok = None
    if base.tokenizer is not None:
        from lmmbench.datasets.perf.registry import load_tokenizer

        tok = load_tokenizer(base.tokenizer)
    check_points(base, points)
    if base.wants_vllm_result() and base.result_dir is not None:  # checked before measuring, not after
        check_writable_dir(base.result_dir, "--result-dir")
    if base.wants_vllm_result() and base.result_filename and Path(base.result_filename).is_absolute():
        check_writable_dir(Path(base.result_filename).parent, "--result-filename's folder")
    from lmmbench.sessions.previous_run import check_baseline

    check_baseline(base.baseline)
    return tok


def _start_run_log(base: PerfConfig, points: list[dict[str, Any]], run_dir: Path, out: PerfFiles) -> RunLog:
    """run.json at the start of a perf run (status "running"; finished and indexed by ``_finish``)."""
    open_loop = base.rate is not None or bool(base.rates) or any(p.get("rate") is not None for p in points) or (
        base.action == "search" and base.search_mode == "rate")
    run_log = RunLog(run_id=new_run_id("perf"), kind="perf", name=run_dir.name, model=base.model,
                     labels=dict(base.labels), started_at=wall_label(), config=base.model_dump(mode="json"),
                     environment=out.env, measurement=measurement_from(measurement_facts(base, open_loop)),
                     run={"points": points, "status": "running", "points_done": 0})  # fmt: skip
    out.run_log(run_log, finished=False, interrupted=False)
    return run_log


class _PerfSession:
    """One perf run in its folder: measures its points (or the search), then writes what it measured."""

    tasks: Any = None  # sessions.perf.quality.TaskQuality of a run of evaluation tasks (--tasks)

    def __init__(self, base: PerfConfig, points: list[dict[str, Any]], run_dir: Path, done: Previous | None,
                 requests: list[PerfRequest] | None, tok: Any, fresh: bool) -> None:  # fmt: skip
        self.base, self.points, self.requests, self.tok, self.fresh = base, points, requests, tok, fresh
        self.out = PerfFiles(run_dir, base.model)
        if done is not None:
            self.out.keep(done.rows, done.perf, done.model, done.records, base.slo)
        self.run = PerfRun(run_dir)
        self.run_log = _start_run_log(base, points, run_dir, self.out)
        self.run.run_id = self.run_log.run_id
        self.telemetry = start_telemetry(base, run_dir)
        self.plan: WorkloadPlan | None = None  # a ByteMLPerf workload's: accuracy first, a server per point

    def point(self, i: int, pcfg: PerfConfig, pf: Preflight) -> LoadResult:
        """Measure load point ``i``; its records, row and entry written before the next one starts."""
        run_dir = self.run.run_dir
        if self.telemetry is not None:
            self.telemetry.point = i
        labels = point_labels(i, pcfg)
        if self.tasks is not None:  # the tasks decide the prompts and their lengths
            labels.update(self.tasks.labels())
        spec_before = scrape_spec_decode(pcfg.url) if pcfg.wants_vllm_result() else None  # vLLM's spec_decode_*
        if self.tasks is not None:
            self.tasks.before_point(pcfg.url, pf.model)
        res = run_benchmark(pcfg, self.requests, self.tok, pf, journal=(str(run_dir / JOURNAL_NAME), labels))
        self.out.add(labels, res)
        if self.tasks is not None:  # answers, accuracy per point
            self.tasks.point_done(i, labels, res, self.out)
        self.run.results.append(res)
        _print_point(labels, res)
        if pcfg.wants_vllm_result():
            from lmmbench.reports.vllm_result_file import write_vllm_result

            path = write_vllm_result(pcfg, res.records, res.model, res.summary.duration_s, run_dir, i,
                                     len(self.points))  # fmt: skip
            spec = spec_decode_keys(spec_before, scrape_spec_decode(pcfg.url) if spec_before else None)
            if spec:  # the server's speculative decoding during this point, as vLLM adds it
                write_json(path, {**json.loads(path.read_text(encoding="utf-8")), **spec})
            self.run.files.append(path)
            print(f"[perf] vLLM-format result: {path}", file=sys.stderr)
        return res

    def measure(self, done: Previous | None, pf: Preflight | None) -> None:
        """The search or the sweep; Ctrl-C ends it as interrupted, anything else as failed (and raises)."""
        base, run = self.base, self.run
        status: RunStatus = "complete"
        try:
            if base.action == "search":
                ready = pf if pf is not None else wait_ready(base, None)
                run.search, self.out.extra["search"] = run_search(
                    base, lambda i, pcfg: self.point(i, pcfg, ready), run.results)
            else:
                if self.plan is not None and self.plan.run_accuracy:  # first, as ByteMLPerf's launcher
                    run.accuracy = self.out.accuracy = run_accuracy(base, self.plan, run.run_dir)
                    self.out.flush()
                per_point = self.plan is not None and not base.server_per_tp
                sweep(base, self.points, done, self.point, pf, per_point=per_point)
        except KeyboardInterrupt:
            status = "interrupted"
            run.interrupted = True
            print("[perf] interrupted: results so far are written", file=sys.stderr)
        except BaseException:
            status = "failed"
            raise
        finally:
            self.out.close()
            self.close(status)

    def close(self, status: RunStatus) -> None:
        """Stop telemetry; a run that failed before measuring leaves nothing, any other one is finished."""
        out, run, run_dir, telemetry = self.out, self.run, self.run.run_dir, self.telemetry
        telemetry_files = [] if telemetry is None else finish_telemetry(
            telemetry, self.base, run_dir, [r for p in out.points for r in p[1]])
        if status == "failed" and not out.rows and not (run_dir / JOURNAL_NAME).exists():
            for f in telemetry_files:
                f.unlink(missing_ok=True)
            remove_empty_run(run_dir, self.fresh)  # failed before measuring: leave nothing that looks like a run
            return
        run.files += telemetry_files
        if telemetry is not None and telemetry.deprecated_names:  # fallbacks the run log must name
            self.run_log.measurement.telemetry_deprecated_metrics = telemetry.deprecated_names  # type: ignore[attr-defined]
        self.run_log.status = status
        self.run_log.run.update(status=status, points_done=len(out.rows),
                                requests_measured=sum(len(p[1]) for p in out.points))
        self.finish(run.interrupted or any(r.interrupted for r in run.results))

    def finish(self, interrupted: bool) -> None:
        """The files written at the end of every run that measured something (complete or not)."""
        out, run, run_dir, run_log = self.out, self.run, self.run.run_dir, self.run_log
        out.flush()
        if run_log.config.get("plots") and out.points:
            from lmmbench.reports.perf_plots import PLOTS_NOTE, plot_run

            files = plot_run(run_dir, out.points)
            if not files:
                print(f"[perf] {PLOTS_NOTE}", file=sys.stderr)
            run.files += files
        from lmmbench.reports.html_report import write_reports

        out.run_log(run_log, finished=True, interrupted=interrupted)
        from lmmbench.sessions.previous_run import print_comparison

        print_comparison(run_dir, run_log, run_log.config.get("baseline"))  # comparison.json, shown by the report
        run.files += write_reports("perf", run_dir)  # a failure is a logged warning, never a lost run
        out.run_log(run_log, finished=True, interrupted=interrupted, index=True)  # with report.html, indexed


def run_perf(cfg: PerfConfig, requests: list[PerfRequest] | None = None, eval_cfg: Any = None) -> PerfRun:
    """Run every point of ``cfg`` (or the SLO search) and write the run folder; ``requests``: built by the caller
    (``bench serve``), else from ``cfg``'s evaluation tasks (``eval_cfg``: eval's config of ``eval --mode perf``)
    or its dataset."""
    tasks = None
    if cfg.tasks and requests is None:
        from lmmbench.sessions.perf.quality import prepare_task_run

        cfg, requests, tasks = prepare_task_run(cfg, eval_cfg)
    base, points = resolve_points(cfg)
    plan = workload_plan(base)
    points = check_tp_sizes(base, points)
    check_server_cmd(base, points)
    tok = _check_before_measuring(base, points)
    run_dir = claim_run_dir(base)
    pf: Preflight | None = None
    if base.server_cmd is not None:
        base = served_model(base, plan, None)  # a started server is checked for the workload's model
    else:
        info = wait_for_server(base.url, base.model, base.wait_for_server, api_key=base.api_key)
        base = served_model(base, plan, info.models if info.listed else None)
        if points:  # the probe is a request: a workload of test_perf false sends none
            pf = preflight(base)  # fails clearly before any folder is made or load is sent
            if tasks is not None:  # an endpoint without prompt log-probs, before any folder too
                tasks.before_point(base.url, pf.model)
    fresh = not run_dir.exists()
    prepare_out_dir(run_dir, "--out-dir/perf/--run-name")
    done = previous_points(base, run_dir, points)
    if done is not None and len(done.done) == len(points) and previous_status(run_dir) == "complete":
        print(f"[perf] {run_dir} is already finished: every point was measured; nothing is measured again",
              file=sys.stderr)  # fmt: skip
        return PerfRun(run_dir, already_finished=True)
    keep_crashed_journal(run_dir)
    session = _PerfSession(base, points, run_dir, done, requests, tok, fresh)
    configure_header(session.out.header, base, plan)
    session.plan = plan
    if plan is not None:  # how servers started: ByteMLPerf's launcher's way, or the --server-per-tp speed-up
        session.run_log.run["servers"] = plan.servers
    session.tasks = tasks
    session.measure(done, pf)
    run = session.run
    run.files += [run_dir / n for n in ("records.jsonl", "records.csv", "summary.csv", "report.json", "run.json")]
    print(f"[perf] results: {run_dir}", file=sys.stderr)
    return run
