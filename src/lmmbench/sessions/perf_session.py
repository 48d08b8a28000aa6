"""A perf run, as a library call (`lmmbench perf`, tests and plan executors call ``run_perf``):
resolve points (sweeps, workloads, search probes), run each, write every file.

Output folder ``<out-dir>/perf/<run-name>/``: records.partial.jsonl (finished requests of the point
in progress, raw instants, appended every 0.5 s by the load workers and removed when the point ends),
records.jsonl / records.csv (full records appended after each point, flushed), summary.csv and
report.json (rewritten after each point, so an interrupted run keeps everything measured),
run.json (the run log: resolved config, environment, how it measured, outcome, headline metrics,
files; written at the start and again at the end, when the run is indexed in the run store), PNG
plots and report.html.
"""

from __future__ import annotations

import contextlib
import csv
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.backends.readiness import wait_for_server
from lmmbench.config.input_files import check_writable_dir, prepare_out_dir
from lmmbench.config.limits import check_limit
from lmmbench.config.loaders import parse_model
from lmmbench.config.perf import PerfConfig
from lmmbench.config.perf_workload_file import load_workload
from lmmbench.core.clock import wall_label
from lmmbench.core.environment import capture_environment
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest, RequestRecord
from lmmbench.core.run_log import RunLog, measurement_from, new_run_id, write_run_log
from lmmbench.core.run_summaries import perf_headline
from lmmbench.loadgen.api import (
    LATENESS_WARN_MS,
    LoadResult,
    Preflight,
    measurement_facts,
    preflight,
    run_benchmark,
)
from lmmbench.loadgen.journal import JOURNAL_NAME
from lmmbench.loadgen.search import CLIENT_LIMITED, ProbeOutcome, SearchResult, search_max_load
from lmmbench.loadgen.spec_decode import scrape_spec_decode, spec_decode_keys
from lmmbench.metrics.perf_metrics import summarize_records
from lmmbench.reports.perf_report import RecordWriter, bytemlperf_entry, summary_row, write_json
from lmmbench.sessions.perf_resume import Previous, load_previous

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
        return (sum(int(r.summary.get("requests", 0)) for r in self.results),
                sum(int(r.summary.get("ok", 0)) for r in self.results))
    interrupted: bool = False
    already_finished: bool = False  # --resume of a run whose every point was measured: nothing was run


def _resolve(cfg: PerfConfig) -> tuple[PerfConfig, list[dict[str, Any]]]:
    explicit = cfg.model_dump(include=cfg.model_fields_set)
    wpoints: list[dict[str, Any]] = [{}]
    merged: dict[str, Any] = dict(explicit)
    if cfg.workload is not None:
        base, wpoints = load_workload(cfg.workload)
        labels = {**base.get("labels", {}), **explicit.get("labels", {})}
        merged = {**base, **explicit, "labels": labels}
    base_cfg = parse_model(PerfConfig, merged, source=f"workload {cfg.workload}" if cfg.workload else "options")
    points = [{**wp, **cp} for wp in wpoints for cp in base_cfg.load_points()]
    return base_cfg, points


def _point_config(base: PerfConfig, point: dict[str, Any], source: str = "load point") -> PerfConfig:
    data = base.model_dump()
    labels = {**data.get("labels", {}), **point.get("labels", {})}
    data.update({k: v for k, v in point.items() if k != "labels"})
    data.update(labels=labels, rates=[], concurrencies=[])
    if point.get("rate") is not None and "concurrency" not in point and not base.model_fields_set & {"concurrency"}:
        data["concurrency"] = None
    if point.get("concurrency") is not None and "rate" not in point:
        data["rate"] = None
    return parse_model(PerfConfig, data, source=source)


def _labels(i: int, pcfg: PerfConfig) -> dict[str, Any]:
    return {"point": i, "rate": pcfg.rate, "concurrency": pcfg.concurrency, "input_tokens": pcfg.input_tokens,
            "output_tokens": pcfg.output_tokens, **pcfg.labels}  # fmt: skip


def _load(labels: dict[str, Any]) -> float:
    return float(labels["rate"] if labels.get("rate") is not None else labels.get("concurrency") or 0)


def _point_name(labels: dict[str, Any]) -> str:
    return f"rate {labels['rate']:g}" if labels.get("rate") is not None else f"conc {labels.get('concurrency')}"


class _Outputs:
    def __init__(self, run_dir: Path, base: PerfConfig) -> None:
        self.run_dir = run_dir
        self.writer = RecordWriter(run_dir)
        self.rows: list[dict[str, Any]] = []
        self.perf: list[dict[str, Any]] = []
        self.points: list[tuple[str, list[RequestRecord], dict[str, Any], float]] = []
        self.env = capture_environment()
        self.extra: dict[str, Any] = {}
        self.model = base.model

    def keep(self, prev: Previous, base: PerfConfig) -> None:
        """Start from the points a resumed run already measured (rows and entries as written)."""
        self.rows, self.perf, self.model = list(prev.rows), list(prev.perf), prev.model or self.model
        for _point, records in sorted(prev.records.items()):
            labels = records[0].labels if records else {}
            summary = summarize_records(records, base.slo)
            self.points.append((_point_name(labels), records, summary, _load(labels)))

    def add(self, labels: dict[str, Any], res: LoadResult) -> None:
        self.model = res.model
        self.writer.write(res.records, labels)
        (self.run_dir / JOURNAL_NAME).unlink(missing_ok=True)  # its requests are in records.jsonl now
        self.rows.append(summary_row(labels, res.summary))
        self.perf.append(bytemlperf_entry(labels, res.summary))
        self.points.append((_point_name(labels), res.records, res.summary, _load(labels)))
        self.flush()

    def flush(self) -> None:
        if self.rows:
            cols: list[str] = []
            for row in self.rows:
                cols += [c for c in row if c not in cols]
            with (self.run_dir / "summary.csv").open("w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=cols)
                w.writeheader()
                w.writerows(self.rows)
        out_tokens = [p["labels"].get("output_tokens") for p in self.perf]
        write_json(self.run_dir / "report.json", {
            "schema_version": 1, "Model": self.model, "Backend": "openai-http", "Host Info": self.env["cpu"],
            "Min New Tokens": min((x for x in out_tokens if x), default=None),
            "Max New Tokens": max((x for x in out_tokens if x), default=None),
            "Performance": self.perf, **self.extra,
        })  # fmt: skip

    def close(self) -> None:
        self.writer.close()

    def run_log(self, run_log: RunLog, *, finished: bool, interrupted: bool, index: bool = False) -> None:
        """Write run.json (the run log) now; at the end with counts, headline and files, and indexed."""
        ok = sum(int(r.get("ok") or 0) for r in self.rows)
        by_kind: dict[str, int] = {}
        for p in self.perf:
            for kind, n in p["lmmbench"].get("errors_by_kind", {}).items():
                by_kind[kind] = by_kind.get(kind, 0) + int(n)
        run_log.model = self.model
        run_log.outcome = run_log.outcome.model_validate({
            "ok": ok if self.rows else None, "failed": sum(by_kind.values()) if self.rows else None,
            "interrupted": interrupted, "failures_by_kind": by_kind,
            "not_sent": sum(int(r.get("not_sent") or 0) for r in self.rows) if self.rows else None,
        })  # fmt: skip
        run_log.headline = perf_headline(self.rows)
        if self.extra.get("search"):
            run_log.run["search"] = self.extra["search"]
        if finished:
            run_log.finished_at = wall_label()
            run_log.files = sorted(str(p.relative_to(self.run_dir)) for p in self.run_dir.iterdir() if p.is_file())
        write_run_log(self.run_dir, run_log, index=index)


def _start_server(cmd: str, tp: Any, batch: Any, url: str) -> subprocess.Popen[bytes]:
    from urllib.parse import urlsplit

    port = urlsplit(url).port or 80
    argv = shlex.split(cmd.format(tp=tp, batch=batch, port=port))
    print(f"[perf] starting server: {' '.join(argv)}", file=sys.stderr)
    return subprocess.Popen(argv)


def _wait_ready(cfg: PerfConfig, proc: subprocess.Popen[bytes] | None, timeout_s: float = 300) -> Preflight:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return preflight(cfg)
        except UserError:
            if proc is None or time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.25)


def _client_late(res: LoadResult) -> bool:
    """True when the client could not keep the schedule of this point (the lateness warning)."""
    late = res.summary["metrics"]["lateness_ms"]["p99"]
    return bool(late == late and late > LATENESS_WARN_MS)  # NaN (nothing sent): not late


def _print_point(labels: dict[str, Any], res: LoadResult) -> None:
    s, m = res.summary, res.summary["metrics"]
    load = f"rate={labels['rate']:g}/s" if labels.get("rate") is not None else f"conc={labels.get('concurrency')}"
    print(f"[perf] {load} in={labels.get('input_tokens')} out={labels.get('output_tokens')}: "
          f"{s['ok']}/{s['requests']} ok, QPS {s['qps']:.2f}, out tok/s {s['output_token_throughput']:.1f}, "
          f"TTFT mean/p99 {m['ttft_ms']['mean']:.2f}/{m['ttft_ms']['p99']:.2f} ms, "
          f"TPOT {m['tpot_ms']['mean']:.2f} ms, ITL {m['itl_ms']['mean']:.2f} ms, "
          f"lateness p99 {m['lateness_ms']['p99']:.3f} ms"
          + (f", errors {s['errors_by_kind']}" if s["errors"] else ""), file=sys.stderr)  # fmt: skip
    for w in res.warnings:
        print(f"[perf] {w}", file=sys.stderr)


def _keep_crashed_journal(run_dir: Path) -> None:
    """A journal left by a run that crashed in this folder is renamed, never appended to or removed."""
    journal = run_dir / JOURNAL_NAME
    if journal.exists():
        kept = journal.with_name(f"records.partial.crashed-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        journal.rename(kept)
        print(f"[perf] a crashed run left {journal.name}; kept as {kept.name}", file=sys.stderr)


def _start_telemetry(cfg: PerfConfig, run_dir: Path) -> Any:
    if cfg.telemetry_interval_s <= 0:
        return None
    from lmmbench.loadgen.telemetry import TelemetrySampler

    return TelemetrySampler(cfg.url, run_dir, cfg.telemetry_interval_s).start()


def _finish_telemetry(sampler: Any, cfg: PerfConfig, run_dir: Path, records: list[RequestRecord]) -> list[Path]:
    """Stop the sampler; telemetry.jsonl and, with plots, telemetry.png (the HTML report shows it)."""
    from lmmbench.loadgen.telemetry import read_telemetry

    files = [sampler.stop()]
    for note in sampler.notes:
        print(f"[perf] {note}", file=sys.stderr)
    if not sampler.data_rows:  # neither server metrics nor a GPU: nothing was measured
        files[0].unlink(missing_ok=True)
        return []
    if cfg.plots:
        from lmmbench.reports.telemetry_plot import plot_telemetry

        png = plot_telemetry(run_dir, read_telemetry(files[0]), records)
        files += [png] if png is not None else []
    return files


_RUN_FILES = ("run.json", "records.jsonl", "records.csv", "summary.csv", "report.json", JOURNAL_NAME)


def _claim_run_dir(cfg: PerfConfig) -> Path:
    """The run folder: a default name never collides; a named folder that holds a run is refused unless
    --overwrite (its files are then removed), so one run is never appended to another."""
    root = cfg.out_dir / "perf"
    if cfg.resume and (cfg.run_name is None or cfg.action == "search"):
        raise UserError("--resume continues a `perf` run by name: give its --run-name (perf search restarts; "
                        "use --overwrite)")
    if cfg.run_name is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir, n = root / stamp, 1
        while run_dir.exists():
            n += 1
            run_dir = root / f"{stamp}_{n}"
        return run_dir
    run_dir = root / cfg.run_name
    held = [f for f in _RUN_FILES if (run_dir / f).exists()]
    if cfg.resume and (run_dir / "run.json").is_file():
        return run_dir  # continued by run_perf: its finished points are kept
    if held and not cfg.overwrite:
        raise UserError(f"{run_dir} already holds a run ({held[0]}); pass --overwrite to replace it, "
                        f"another --run-name, or `lmmbench perf recover {run_dir}` if it crashed")
    replaced = [f for f in _RUN_FILES if f != JOURNAL_NAME]  # a crashed journal is kept aside, never deleted
    for p in [*(run_dir / f for f in replaced), *run_dir.glob("*.png"), run_dir / "report.html"]:
        if p.is_file():
            p.unlink()
    return run_dir


def _start_run_log(base: PerfConfig, points: list[dict[str, Any]], run_dir: Path, out: _Outputs) -> RunLog:
    """run.json at the start of a perf run (status "running"; finished and indexed by ``_finish``)."""
    open_loop = base.rate is not None or bool(base.rates) or any(p.get("rate") is not None for p in points) or (
        base.action == "search" and base.search_mode == "rate")
    run_log = RunLog(run_id=new_run_id("perf"), kind="perf", name=run_dir.name, model=base.model,
                     labels=dict(base.labels), started_at=wall_label(), config=base.model_dump(mode="json"),
                     environment=out.env, measurement=measurement_from(measurement_facts(base, open_loop)),
                     run={"points": points, "status": "running", "points_done": 0})  # fmt: skip
    out.run_log(run_log, finished=False, interrupted=False)
    return run_log


def _sweep(base: PerfConfig, points: list[dict[str, Any]], done: Previous | None,
           one: Callable[[int, PerfConfig, Preflight], LoadResult], pf: Preflight | None) -> None:  # fmt: skip
    """Every load point in order, grouped by ``tp`` when ``--server-cmd`` starts a server per group;
    points a resumed run already measured are skipped. An interrupted point raises KeyboardInterrupt."""
    groups: dict[Any, list[tuple[int, PerfConfig]]] = {}
    for i, point in enumerate(points):
        pcfg = _point_config(base, point)
        groups.setdefault(pcfg.labels.get("tp") if base.server_cmd else None, []).append((i, pcfg))
    for tp, items in groups.items():
        proc = None
        if base.server_cmd:
            proc = _start_server(base.server_cmd, tp, items[0][1].labels.get("batch"), base.url)
            pf = _wait_ready(base, proc)
        if pf is None:
            raise UserError("perf: no server to send to (give --url, or --server-cmd to start one)")
        try:
            for i, pcfg in items:
                if done is not None and i in done.done:
                    continue  # measured by the session this --resume continues
                if one(i, pcfg, pf).interrupted:
                    raise KeyboardInterrupt
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)


def run_perf(cfg: PerfConfig, requests: list[PerfRequest] | None = None) -> PerfRun:
    """Run every point of ``cfg`` (or the SLO search) and write the run folder; ``requests``: built by the caller
    (``bench serve``), else from ``cfg``'s dataset."""
    base, points = _resolve(cfg)
    if base.action == "search" and not base.slo:
        raise UserError("perf search needs --slo, e.g. --slo ttft_ms=500,tpot_ms=50")
    tok = None
    if base.tokenizer is not None:
        from lmmbench.datasets.perf_datasets import load_tokenizer

        tok = load_tokenizer(base.tokenizer)
    check_limit("sweep_points", len(points), "load points (workload points x sweep)")
    for i, point in enumerate(points):  # a negative or NaN value of any point is refused before the server is asked
        _point_config(base, point, f"load point {i + 1}" + (f" of {base.workload}" if base.workload else ""))
    if base.wants_vllm_result() and base.result_dir is not None:  # checked before measuring, not after
        check_writable_dir(base.result_dir, "--result-dir")
    if base.wants_vllm_result() and base.result_filename and Path(base.result_filename).is_absolute():
        check_writable_dir(Path(base.result_filename).parent, "--result-filename's folder")
    from lmmbench.sessions.previous_run import check_baseline

    check_baseline(base.baseline)
    run_dir = _claim_run_dir(base)
    pf: Preflight | None = None
    if base.server_cmd is None:
        wait_for_server(base.url, base.model, base.wait_for_server, api_key=base.api_key)
        pf = preflight(base)  # fails clearly before any folder is made or load is sent
    fresh = not run_dir.exists()
    prepare_out_dir(run_dir, "--out-dir/perf/--run-name")
    done = _previous_points(base, run_dir, points)
    if done is not None and len(done.done) == len(points) and _previous_status(run_dir) == "complete":
        print(f"[perf] {run_dir} is already finished: every point was measured; nothing is measured again",
              file=sys.stderr)  # fmt: skip
        return PerfRun(run_dir, already_finished=True)
    _keep_crashed_journal(run_dir)
    out = _Outputs(run_dir, base)
    if done is not None:
        out.keep(done, base)
    run = PerfRun(run_dir)
    run_log = _start_run_log(base, points, run_dir, out)
    run.run_id = run_log.run_id
    status = "complete"

    telemetry = _start_telemetry(base, run_dir)

    def one(i: int, pcfg: PerfConfig, pf: Preflight) -> LoadResult:
        if telemetry is not None:
            telemetry.point = i
        labels = _labels(i, pcfg)
        spec_before = scrape_spec_decode(pcfg.url) if pcfg.wants_vllm_result() else None  # vLLM's spec_decode_*
        res = run_benchmark(pcfg, requests, tok, pf, journal=(str(run_dir / JOURNAL_NAME), labels))
        out.add(labels, res)
        run.results.append(res)
        _print_point(labels, res)
        if pcfg.wants_vllm_result():
            from lmmbench.reports.vllm_result_file import write_vllm_result

            path = write_vllm_result(pcfg, res.records, res.model, res.summary["duration_s"], run_dir, i, len(points))
            spec = spec_decode_keys(spec_before, scrape_spec_decode(pcfg.url) if spec_before else None)
            if spec:  # the server's speculative decoding during this point, as vLLM adds it
                write_json(path, {**json.loads(path.read_text(encoding="utf-8")), **spec})
            run.files.append(path)
            print(f"[perf] vLLM-format result: {path}", file=sys.stderr)
        return res

    try:
        if base.action == "search":
            ready = pf if pf is not None else _wait_ready(base, None)
            run.search = _search(base, lambda i, pcfg: one(i, pcfg, ready), run, out)
        else:
            _sweep(base, points, done, one, pf)
    except KeyboardInterrupt:
        status = "interrupted"
        run.interrupted = True
        print("[perf] interrupted: results so far are written", file=sys.stderr)
    except BaseException:
        status = "failed"
        raise
    finally:
        out.close()
        telemetry_files = [] if telemetry is None else _finish_telemetry(
            telemetry, base, run_dir, [r for p in out.points for r in p[1]])
        if status == "failed" and not out.rows and not (run_dir / JOURNAL_NAME).exists():
            for f in telemetry_files:
                f.unlink(missing_ok=True)
            _remove_empty_run(run_dir, fresh)  # failed before measuring: leave nothing that looks like a run
        else:
            run.files += telemetry_files
            if telemetry is not None and telemetry.deprecated_names:  # fallbacks the run log must name
                run_log.measurement.telemetry_deprecated_metrics = telemetry.deprecated_names  # type: ignore[attr-defined]
            run_log.run.update(status=status, points_done=len(out.rows),
                               requests_measured=sum(len(p[1]) for p in out.points))
            _finish(run, run_dir, out, run_log, run.interrupted or any(r.interrupted for r in run.results))
    run.files += [run_dir / n for n in ("records.jsonl", "records.csv", "summary.csv", "report.json", "run.json")]
    print(f"[perf] results: {run_dir}", file=sys.stderr)
    return run


def _search(base: PerfConfig, one: Callable[[int, PerfConfig], LoadResult], run: PerfRun,
            out: _Outputs) -> SearchResult:  # fmt: skip
    """``perf search``: bisect the load; a failure the client flagged as late is probed again once, and
    twice late makes the probe client-limited (it says nothing about the server)."""
    integer = base.search_mode == "concurrency"
    probe_base = base
    if base.num_requests is None and base.duration_s is None:
        probe_base = base.model_copy(update={"duration_s": 10.0})

    def probe(x: float) -> ProbeOutcome:
        key = "rate" if not integer else "concurrency"
        for attempt in (1, 2):
            point = {key: int(x) if integer else x, "labels": {"search_probe": len(run.results), "attempt": attempt}}
            res = one(len(run.results), _point_config(probe_base, point))
            if res.interrupted:
                raise KeyboardInterrupt
            passed = bool(res.summary["slo_attainment"] >= base.slo_attainment)
            if passed or not _client_late(res):  # a late pass is a pass: lateness only adds latency
                return passed
            if attempt == 1:
                print(f"[perf] search: {x:g} failed while the client was late; probing it again", file=sys.stderr)
        return CLIENT_LIMITED

    sr = search_max_load(probe, base.search_low, base.search_high, base.search_iterations, integer)
    unit = "req/s" if not integer else "concurrent clients"
    out.extra["search"] = {"mode": base.search_mode, "slo": base.slo, "attainment": base.slo_attainment,
                           "best": sr.best, "lowest_failing": sr.lowest_failing, "gap": sr.gap,
                           "probes": sr.probes, "client_limited": sr.client_limited,
                           "limited_by": sr.verdict, "verdict": sr.describe(unit)}  # fmt: skip
    print(f"[perf] search: {sr.describe(unit)}", file=sys.stderr)
    return sr


def _previous_status(run_dir: Path) -> str | None:
    """The status the run log of the run in ``run_dir`` records (complete, interrupted, failed)."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    status = (info.get("run") or {}).get("status", info.get("status"))
    return str(status) if status is not None else None


def _previous_points(base: PerfConfig, run_dir: Path, points: list[dict[str, Any]]) -> Previous | None:
    """What the run being resumed already measured (None when this is not a resume)."""
    if not (base.resume and (run_dir / "run.json").is_file()):
        return None
    prev = load_previous(run_dir, points)
    print(f"[perf] resuming {run_dir}: {len(prev.done)} of {len(points)} point(s) already measured",
          file=sys.stderr)  # fmt: skip
    return prev


def _remove_empty_run(run_dir: Path, fresh: bool) -> None:
    for name in (*_RUN_FILES, "report.html"):
        (run_dir / name).unlink(missing_ok=True)
    if fresh:
        with contextlib.suppress(OSError):
            run_dir.rmdir()


def _finish(run: PerfRun, run_dir: Path, out: _Outputs, run_log: RunLog, interrupted: bool) -> None:
    """The files written at the end of every run that measured something (complete or not)."""
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
