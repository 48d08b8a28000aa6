"""``run_benchmark(config) -> LoadResult``: one load point, in-process or fanned out over processes.

Steps: pre-flight (endpoint reachable, model served, continuous usage accepted), requests from
the dataset, one global schedule (open loop) or id list (closed loop) split over ``workers``
processes that share one ``t0`` (``perf_counter_ns`` is system-wide monotonic), records merged
and summarised. The only file written here is the optional journal of finished requests
(``lmmbench.loadgen.journal``); ``lmmbench.sessions.perf.session`` writes the result files
(``reports.perf_files``).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.core.request_records import PerfRequest, RequestRecord
from lmmbench.core.signals import record_stop_signal
from lmmbench.loadgen.arrivals import arrival_offsets_ns
from lmmbench.loadgen.driver import WorkerPlan, WorkerResult, run_worker
from lmmbench.loadgen.protocol import make_client
from lmmbench.metrics.perf_metrics import PerfSummary, summarize_records

__all__ = ["LoadResult", "ModelNotServed", "Preflight", "measurement_facts", "preflight", "requested_output_range",
           "run_benchmark"]

LATENESS_WARN_MS = 1.0


class ModelNotServed(UserError):
    """The server answers but does not serve the model asked for (waiting longer will not help)."""


@dataclass
class Preflight:
    """What the pre-flight check learned about the server."""

    model: str
    continuous_usage: bool
    probe_ttft_ms: float
    probe_e2e_ms: float


@dataclass
class LoadResult:
    """Records and summary of one load point."""

    config: PerfConfig
    records: list[RequestRecord]
    summary: PerfSummary
    not_sent: int = 0
    interrupted: bool = False
    connections_opened: int = 0
    workers: int = 1
    model: str = ""
    warnings: list[str] = field(default_factory=list)
    client_cpu_s: float = 0.0  # CPU time of the client process(es) during the load
    worker_clocks: list[Any] = field(default_factory=list)  # Ray actors' clock offsets (ray_fanout.ActorClock)
    requested_output_tokens: tuple[int, int] | None = None  # (min, max) max_tokens the requests asked for


def _client_kwargs(cfg: PerfConfig, model: str, continuous: bool) -> dict[str, Any]:
    return {
        "url": cfg.url,
        "model": model,
        "api_key": cfg.api_key or os.environ.get("OPENAI_API_KEY"),
        "timeout_s": cfg.timeout_s,
        "extra_body": cfg.extra_body,
        "continuous_usage": continuous,
        **({"insecure": True} if cfg.insecure else {}),
    }


async def _preflight_async(cfg: PerfConfig) -> Preflight:
    from lmmbench.backends.openai_stream import finalize_record

    client = make_client("openai-http", **_client_kwargs(cfg, cfg.model or "", cfg.continuous_usage))
    try:
        models_rec = await client.request_once(None, method="GET", timeout_s=10)  # type: ignore[attr-defined]
    except (OSError, asyncio.TimeoutError) as exc:
        raise UserError(f"cannot reach {cfg.url}: {exc}; is the server running?") from None
    served: list[str] = []
    body = models_rec.event_data[0] if models_rec.event_data else models_rec.error_body
    if models_rec.status == 200 and body:
        import json

        try:
            served = [str(m.get("id")) for m in json.loads(body).get("data", [])]
        except (ValueError, AttributeError):
            served = []
    model = cfg.model
    if model is None:
        if not served:
            raise UserError(f"{cfg.url} does not list its models; give --model")
        model = served[0]
    elif served and model not in served:
        raise ModelNotServed(f"model '{model}' is not served at {cfg.url}; served: {', '.join(served)}")
    continuous = cfg.continuous_usage
    probe_payload: dict[str, Any] = {"max_tokens": 4}
    if cfg.endpoint == "chat":
        probe_payload["messages"] = [{"role": "user", "content": "hello"}]
    else:
        probe_payload["prompt"] = "hello"
    if cfg.ignore_eos:
        probe_payload.update(ignore_eos=True, min_tokens=4)  # sent with every request: must be accepted

    async def probe_once(payload: dict[str, Any], cont: bool) -> RequestRecord:
        client = make_client("openai-http", **_client_kwargs(cfg, model, cont))
        r: RequestRecord = await client.request_once(  # type: ignore[attr-defined]
            PerfRequest(-1, payload, cfg.endpoint), timeout_s=min(cfg.timeout_s, 60.0)
        )
        return finalize_record(r)

    rec = await probe_once(probe_payload, continuous)
    if rec.status == 400 and continuous:
        continuous = False  # the server rejects stream_options.continuous_usage_stats
        rec = await probe_once(probe_payload, continuous)
    if rec.status == 400 and "ignore_eos" in probe_payload:
        plain = {k: v for k, v in probe_payload.items() if k not in ("ignore_eos", "min_tokens")}
        if (await probe_once(plain, continuous)).status == 200:
            raise UserError(
                f"{cfg.url} rejects ignore_eos/min_tokens ({rec.error_message}); rerun with --no-ignore-eos"
            )
    if rec.status == 404:
        raise ModelNotServed(f"{cfg.url}: model '{model}' not found ({rec.error_message})")
    if rec.error_kind in ("connect", "timeout") or rec.status == 0:
        raise UserError(f"{cfg.url}: pre-flight request failed: {rec.error_kind} {rec.error_message}")
    if rec.status != 200:
        raise UserError(f"{cfg.url}: pre-flight request failed: {rec.error_message}")
    ttft = (rec.first_token_ns - rec.sent_ns) / 1e6 if rec.first_token_ns else 0.0
    return Preflight(model, continuous, ttft, (rec.end_ns - rec.sent_ns) / 1e6)


def preflight(cfg: PerfConfig) -> Preflight:
    """Check the endpoint before any load: reachable, model served, which usage stats it accepts."""
    return asyncio.run(_preflight_async(cfg))


def _request_count(cfg: PerfConfig) -> int | None:
    """Requests to send: ``num_requests``; None (until the duration ends) with only ``duration_s``; else 100."""
    return cfg.num_requests if cfg.num_requests is not None else (None if cfg.duration_s else 100)


def _split(n: int, parts: int, i: int) -> int:
    return n // parts + (1 if i < n % parts else 0)


def _plans(cfg: PerfConfig, requests: list[PerfRequest], pf: Preflight, workers: int) -> list[WorkerPlan]:
    kwargs = _client_kwargs(cfg, pf.model, pf.continuous_usage)
    out_tokens = cfg.output_tokens or 128
    itl_est = max((pf.probe_e2e_ms - pf.probe_ttft_ms) / 3.0, 0.0)
    est_latency_s = (pf.probe_e2e_ms + out_tokens * itl_est) / 1e3 * 1.5 + 0.05
    common: dict[str, Any] = {
        "client_kwargs": kwargs,
        "requests": requests,
        "warmup": 0,
        "spin_ns": int(cfg.spin_us * 1000),
        "tokenizer": str(cfg.tokenizer) if cfg.tokenizer else None,
        "keep_text": cfg.keep_text,
        "drain_timeout_s": cfg.timeout_s + 5,
        "labels": dict(cfg.labels),
    }
    plans = []
    n = _request_count(cfg)
    if any(r.turn or r.arrival_ns is not None for r in requests):  # multi-turn or trace: the dataset decides
        plans = _structured_plans(cfg, requests, workers, common)
    elif cfg.rate is not None:
        offsets = arrival_offsets_ns(cfg.arrival, cfg.rate, count=n, duration_s=cfg.duration_s if n is None else None,
                                     seed=cfg.seed, burstiness=cfg.burstiness)  # fmt: skip
        for w in range(workers):
            cap = _split(cfg.concurrency, workers, w) if cfg.concurrency else None
            share = len(offsets) // workers + 1
            pre = share if math.isinf(cfg.rate) else min(share, math.ceil(cfg.rate / workers * est_latency_s) + 4)
            plans.append(WorkerPlan(worker=w, schedule=[(i, off) for i, off in enumerate(offsets) if i % workers == w],
                                    concurrency=cap, preopen=min(pre, cap or pre, 4096), **common))  # fmt: skip
    else:
        conc = cfg.concurrency or 1
        for w in range(workers):
            c = _split(conc, workers, w)
            ids = list(range(w, n, workers)) if n is not None else None
            plans.append(WorkerPlan(worker=w, closed_ids=ids, closed_stride=workers, concurrency=c,
                                    duration_ns=int(cfg.duration_s * 1e9) if n is None and cfg.duration_s else None,
                                    preopen=c, **common))  # fmt: skip
    if cfg.warmup_requests:
        for w, p in enumerate(plans):
            p.warmup = _split(cfg.warmup_requests, workers, w)
    return plans


def _structured_plans(cfg: PerfConfig, requests: list[PerfRequest], workers: int,
                      common: dict[str, Any]) -> list[WorkerPlan]:  # fmt: skip
    """Plans for datasets that carry their own structure: every first turn is scheduled once, later
    turns follow their predecessor (driver); trace requests keep their arrival times (rate unused)."""
    starts = [i for i, r in enumerate(requests) if r.turn == 0]
    closed = cfg.rate is None and requests[starts[0]].arrival_ns is None
    if closed:
        conc = cfg.concurrency or 1
        until = int(cfg.duration_s * 1e9) if cfg.duration_s and cfg.num_requests is None else None
        return [WorkerPlan(worker=w, closed_ids=starts[w::workers], concurrency=_split(conc, workers, w),
                           duration_ns=until, preopen=_split(conc, workers, w), **common)
                for w in range(workers)]  # fmt: skip
    if requests[starts[0]].arrival_ns is not None:
        offsets = [requests[i].arrival_ns or 0 for i in starts]
    else:
        assert cfg.rate is not None
        offsets = arrival_offsets_ns(cfg.arrival, cfg.rate, count=len(starts), seed=cfg.seed,
                                     burstiness=cfg.burstiness)  # fmt: skip
    schedule = sorted(zip(starts, offsets, strict=True), key=lambda x: x[1])
    plans = []
    for w in range(workers):
        cap = _split(cfg.concurrency, workers, w) if cfg.concurrency else None
        plans.append(WorkerPlan(worker=w, schedule=schedule[w::workers], concurrency=cap,
                                preopen=min(cap or 16, 16), **common))  # fmt: skip
    return plans


def _progress_printer(total: int | None) -> Any:
    last = [0.0, 0, time.perf_counter()]
    tty = sys.stderr.isatty()

    def show(issued: int, completed: int, errors: int, in_flight: int) -> None:
        now = time.perf_counter()
        if not tty or now - last[0] < 0.5:
            return
        rate = (issued - last[1]) / (now - last[2]) if now > last[2] else 0.0
        last[:] = [now, issued, now]
        tot = f"/{total}" if total else ""
        sys.stderr.write(f"\r[perf] sent {issued}{tot}  {rate:7.1f} req/s  in flight {in_flight:4d}  "
                         f"done {completed}  errors {errors}   ")  # fmt: skip
        sys.stderr.flush()

    return show


def _die_with_parent() -> None:
    """Linux: end this worker when the parent dies (SIGKILL, OOM), instead of sending load orphaned."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call above
        os._exit(1)


def _worker_entry(plan: WorkerPlan, loop_kind: str, conn: Any, counters: Any) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    def start() -> int:
        conn.send(("ready", None))
        t0: int = conn.recv()
        return t0

    def progress(d: Any) -> None:
        base = plan.worker * 4
        counters[base], counters[base + 1] = d.issued, d.completed
        counters[base + 2], counters[base + 3] = d.errors, d.in_flight

    try:
        res = run_worker(plan, loop_kind, start, progress)
        conn.send(("result", res))
    except BaseException as exc:  # report, never hang the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _run_multi(plans: list[WorkerPlan], cfg: PerfConfig, total: int | None) -> list[WorkerResult]:
    ctx = mp.get_context("spawn")
    counters = ctx.Array("q", len(plans) * 4, lock=False)
    pipes, procs = [], []
    for plan in plans:
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_entry, args=(plan, cfg.loop, child, counters), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # workers stop themselves on Ctrl-C

    def forward_sigterm(signum: int, _frame: Any) -> None:  # workers stop and hand back what they measured
        record_stop_signal(signum)
        for p in procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGTERM)

    old_term = signal.signal(signal.SIGTERM, forward_sigterm)
    results: list[WorkerResult] = []
    try:
        for conn in pipes:
            kind, payload = conn.recv()
            if kind == "error":
                raise UserError(f"load worker failed before the start: {payload}")
        t0 = time.perf_counter_ns() + 100_000_000
        for conn in pipes:
            conn.send(t0)
        show = _progress_printer(total) if cfg.progress else None
        pending = dict(enumerate(pipes))
        while pending:
            for i, conn in list(pending.items()):
                if conn.poll(0.1):
                    kind, payload = conn.recv()
                    if kind == "error":
                        raise UserError(f"load worker {i} failed: {payload}")
                    results.append(payload)
                    del pending[i]
            if show is not None:
                c = list(counters)
                show(*(sum(c[j::4]) for j in range(4)))
    finally:
        signal.signal(signal.SIGINT, old)
        signal.signal(signal.SIGTERM, old_term)
        for p in procs:
            p.join(5)
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGTERM)
    return results


def requested_output_range(requests: list[PerfRequest]) -> tuple[int, int] | None:
    """(min, max) of the output lengths the requests ask for (``max_tokens`` / ``max_completion_tokens`` of the
    body, else the data set's count); None when no request names one."""
    asked: list[int] = []
    for req in requests:
        body = req.payload
        value = body.get("max_completion_tokens", body.get("max_tokens", req.output_tokens))
        if isinstance(value, int) and not isinstance(value, bool):
            asked.append(value)
    return (min(asked), max(asked)) if asked else None


def run_benchmark(
    config: PerfConfig,
    requests: list[PerfRequest] | None = None,
    tokenizer: Any | None = None,
    pf: Preflight | None = None,
    journal: tuple[str, dict[str, Any]] | None = None,
) -> LoadResult:
    """Run one load point described by ``config`` and return its records and summary.

    ``journal=(path, labels)``: finished requests are appended to ``path`` while the point runs
    (raw instants, see ``lmmbench.loadgen.journal``); the caller removes it once it has the records.
    """
    cfg = config
    pf = pf or preflight(cfg)
    workers = cfg.workers
    if cfg.rate is None and cfg.concurrency is not None:
        workers = max(1, min(workers, cfg.concurrency))
    if requests is None:
        from lmmbench.datasets.perf.catalog import build_requests
        from lmmbench.datasets.perf.registry import load_tokenizer

        if tokenizer is None and cfg.tokenizer is not None:
            tokenizer = load_tokenizer(cfg.tokenizer)
        n_distinct = _request_count(cfg) or 1000
        requests = build_requests(cfg, n_distinct, tokenizer)
    plans = _plans(cfg, requests, pf, workers)
    if journal is not None:
        for p in plans:
            p.journal_path, p.journal_labels = journal
    total = _request_count(cfg)
    clocks: list[Any] = []
    if workers == 1 and cfg.executor == "local":
        show = _progress_printer(total) if cfg.progress else None

        def progress(d: Any) -> None:
            if show is not None:
                show(d.issued, d.completed, d.errors, d.in_flight)

        results = [run_worker(plans[0], cfg.loop, None, progress)]
    elif cfg.executor == "ray":
        from lmmbench.loadgen.ray_fanout import run_on_ray

        results, clocks = run_on_ray(plans, cfg.loop, cfg.ray_address)
    else:
        results = _run_multi(plans, cfg, total)
    if cfg.progress and sys.stderr.isatty():
        sys.stderr.write("\n")
    records = sorted((r for res in results for r in res.records), key=lambda r: (r.scheduled_ns, r.request_id))
    not_sent = sum(res.not_sent for res in results)
    summary = summarize_records(records, cfg.slo, not_sent, cfg.percentiles)
    result = LoadResult(cfg, records, summary, not_sent, any(r.interrupted for r in results),
                        sum(r.connections_opened for r in results), workers, pf.model)  # fmt: skip
    result.client_cpu_s = sum(r.cpu_s for r in results)
    result.worker_clocks = clocks
    result.requested_output_tokens = requested_output_range(requests)
    if clocks:
        result.warnings.append("note: Ray actors' clock offsets from this process (ms, +- half the best ping): "
                               + ", ".join(f"{c.node} {c.offset_ns / 1e6:+.3f} +- {c.rtt_ns / 2e6:.3f}"
                                           for c in clocks))  # fmt: skip
    late = summary.metrics["lateness_ms"].p99
    if late > LATENESS_WARN_MS:
        result.warnings.append(
            f"WARNING: client p99 lateness {late:.2f} ms > {LATENESS_WARN_MS} ms: this client could not keep "
            f"the schedule (busy machine, or too much load for one process: try --workers N); latencies from "
            f"the scheduled time include its lateness"
        )
    if summary.new_connections:
        result.warnings.append(f"note: {summary.new_connections} requests had to open a new connection")
    return result


def measurement_facts(cfg: PerfConfig, open_loop: bool) -> dict[str, Any]:
    """How a load test of ``cfg`` measures: the event loop and what fires the sends (for the run log)."""
    import importlib.util

    from lmmbench.loadgen.precise_timer import timerfd_available

    loop = cfg.loop if cfg.loop != "auto" else ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    send = "closed-loop"
    if open_loop:
        send = "timerfd" if timerfd_available() else f"sleep+spin {cfg.spin_us:g} us"
    return {"timer": "perf_counter_ns", "event_loop": loop, "send_timer": send, "workers": cfg.workers}
