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

import csv
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.config.cli_options import parse_model
from lmmbench.config.perf import PerfConfig
from lmmbench.config.perf_workload import load_workload
from lmmbench.core.clock import wall_label
from lmmbench.core.environment import capture_environment
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import RequestRecord
from lmmbench.core.run_log import RunLog, measurement_from, new_run_id, write_run_log
from lmmbench.core.run_summaries import perf_headline
from lmmbench.loadgen.api import LoadResult, Preflight, measurement_facts, preflight, run_benchmark
from lmmbench.loadgen.journal import JOURNAL_NAME
from lmmbench.loadgen.search import SearchResult, search_max_load
from lmmbench.reports.perf_report import RecordWriter, bytemlperf_entry, summary_row, write_json

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


def _point_config(base: PerfConfig, point: dict[str, Any]) -> PerfConfig:
    data = base.model_dump()
    labels = {**data.get("labels", {}), **point.get("labels", {})}
    data.update({k: v for k, v in point.items() if k != "labels"})
    data.update(labels=labels, rates=[], concurrencies=[])
    if point.get("rate") is not None and "concurrency" not in point and not base.model_fields_set & {"concurrency"}:
        data["concurrency"] = None
    if point.get("concurrency") is not None and "rate" not in point:
        data["rate"] = None
    return parse_model(PerfConfig, data, source="load point")


def _labels(i: int, pcfg: PerfConfig) -> dict[str, Any]:
    return {"point": i, "rate": pcfg.rate, "concurrency": pcfg.concurrency, "input_tokens": pcfg.input_tokens,
            "output_tokens": pcfg.output_tokens, **pcfg.labels}  # fmt: skip


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

    def add(self, labels: dict[str, Any], res: LoadResult) -> None:
        self.model = res.model
        self.writer.write(res.records, labels)
        (self.run_dir / JOURNAL_NAME).unlink(missing_ok=True)  # its requests are in records.jsonl now
        self.rows.append(summary_row(labels, res.summary))
        self.perf.append(bytemlperf_entry(labels, res.summary))
        load = float(labels["rate"] if labels.get("rate") is not None else labels.get("concurrency") or 0)
        name = f"rate {labels['rate']:g}" if labels.get("rate") is not None else f"conc {labels.get('concurrency')}"
        self.points.append((name, res.records, res.summary, load))
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


def run_perf(cfg: PerfConfig) -> PerfRun:
    """Run every point of ``cfg`` (or the SLO search) and write the run folder."""
    base, points = _resolve(cfg)
    if base.action == "search" and not base.slo:
        raise UserError("perf search needs --slo, e.g. --slo ttft_ms=500,tpot_ms=50")
    tok = None
    if base.tokenizer is not None:
        from lmmbench.datasets.perf_datasets import load_tokenizer

        tok = load_tokenizer(base.tokenizer)
    if base.server_cmd is None:
        pf = preflight(base)  # fails clearly before any folder is made or load is sent
    run_name = base.run_name or time.strftime("%Y%m%d-%H%M%S")
    run_dir = base.out_dir / "perf" / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    _keep_crashed_journal(run_dir)
    out = _Outputs(run_dir, base)
    run = PerfRun(run_dir)
    open_loop = base.rate is not None or bool(base.rates) or any(p.get("rate") is not None for p in points) or (
        base.action == "search" and base.search_mode == "rate")
    run_log = RunLog(run_id=new_run_id("perf"), kind="perf", name=run_name, model=base.model,
                     labels=dict(base.labels), started_at=wall_label(), config=base.model_dump(mode="json"),
                     environment=out.env, measurement=measurement_from(measurement_facts(base, open_loop)),
                     run={"points": points})  # fmt: skip
    out.run_log(run_log, finished=False, interrupted=False)
    run.run_id = run_log.run_id
    interrupted = False

    telemetry = _start_telemetry(base, run_dir)

    def one(i: int, pcfg: PerfConfig, pf: Preflight) -> LoadResult:
        if telemetry is not None:
            telemetry.point = i
        labels = _labels(i, pcfg)
        res = run_benchmark(pcfg, None, tok, pf, journal=(str(run_dir / JOURNAL_NAME), labels))  # builds the requests
        out.add(labels, res)
        run.results.append(res)
        _print_point(labels, res)
        if pcfg.wants_vllm_result():
            from lmmbench.reports.vllm_result_file import write_vllm_result

            path = write_vllm_result(pcfg, res.records, res.model, res.summary["duration_s"], run_dir, i, len(points))
            run.files.append(path)
            print(f"[perf] vLLM-format result: {path}", file=sys.stderr)
        return res

    try:
        if base.action == "search":
            pf = pf if base.server_cmd is None else _wait_ready(base, None)
            integer = base.search_mode == "concurrency"
            probe_base = base
            if base.num_requests is None and base.duration_s is None:
                probe_base = base.model_copy(update={"duration_s": 10.0})

            def probe(x: float) -> bool:
                key = "rate" if not integer else "concurrency"
                point = {key: int(x) if integer else x, "labels": {"search_probe": len(run.results)}}
                res = one(len(run.results), _point_config(probe_base, point), pf)
                return bool(res.summary["slo_attainment"] >= base.slo_attainment and not res.interrupted)

            sr = search_max_load(probe, base.search_low, base.search_high, base.search_iterations, integer)
            run.search = sr
            unit = "req/s" if not integer else "concurrent clients"
            out.extra["search"] = {"mode": base.search_mode, "slo": base.slo, "attainment": base.slo_attainment,
                                   "best": sr.best, "lowest_failing": sr.lowest_failing, "gap": sr.gap,
                                   "probes": sr.probes, "verdict": sr.describe(unit)}  # fmt: skip
            print(f"[perf] search: {sr.describe(unit)}", file=sys.stderr)
        else:
            groups: dict[Any, list[tuple[int, PerfConfig]]] = {}
            for i, point in enumerate(points):
                pcfg = _point_config(base, point)
                groups.setdefault(pcfg.labels.get("tp") if base.server_cmd else None, []).append((i, pcfg))
            for tp, items in groups.items():
                proc = None
                if base.server_cmd:
                    proc = _start_server(base.server_cmd, tp, items[0][1].labels.get("batch"), base.url)
                    pf = _wait_ready(base, proc)
                try:
                    for i, pcfg in items:
                        if one(i, pcfg, pf).interrupted:
                            raise KeyboardInterrupt
                finally:
                    if proc is not None:
                        proc.terminate()
                        proc.wait(30)
    except KeyboardInterrupt:
        interrupted = True
        print("[perf] interrupted: results so far are written", file=sys.stderr)
    finally:
        out.flush()
        out.close()
        if telemetry is not None:
            run.files += _finish_telemetry(telemetry, base, run_dir, [r for p in out.points for r in p[1]])
        if base.plots and out.points:
            from lmmbench.reports.perf_plots import PLOTS_NOTE, plot_run

            files = plot_run(run_dir, out.points)
            if not files:
                print(f"[perf] {PLOTS_NOTE}", file=sys.stderr)
            run.files += files
        from lmmbench.reports.html_report import write_reports

        out.run_log(run_log, finished=True, interrupted=interrupted or any(r.interrupted for r in run.results))
        run.files += write_reports("perf", run_dir)  # a failure is a logged warning, never a lost run
        out.run_log(run_log, finished=True, interrupted=run_log.outcome.interrupted, index=True)  # + report.html
    run.files += [run_dir / n for n in ("records.jsonl", "records.csv", "summary.csv", "report.json", "run.json")]
    print(f"[perf] results: {run_dir}", file=sys.stderr)
    return run
