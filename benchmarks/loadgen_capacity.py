"""Load generator capacity: the highest open-loop rate lmmbench sustains against the shipped test server.

For each client configuration (``--workers``) and each rate of a ladder, one open-loop Poisson run
of ``--duration-s`` against ``lmmbench testserver`` on the same machine (TTFT 20 ms, ITL 5 ms).
A rate is *clean* when the achieved send rate is within 2 % of the schedule's own rate, the p99
client lateness (sent − scheduled) is at most 1 ms, and no request failed. Reported per
configuration: the highest clean rate (median over ``--repeats``), the mean TTFT overhead over
the injected value at 200 and 400 req/s (from the scheduled time and from the send time), and
the machine's load average during each run (the box may be shared: only a quiet box measures
the client rather than its neighbours).

    .venv/bin/python benchmarks/loadgen_capacity.py --repeats 3 --out /tmp/cap.json

Peers: with ``--aiperf PATH --peer-tokenizer DIR`` aiperf runs at 200 and 400 req/s in the same
repeat loop, against the same server (``--use-server-token-count``, so its ITL is not skewed by a
tokenizer that disagrees with the server); its mean TTFT overhead, ITL and achieved throughput are
reported next to lmmbench's. With ``--inference-perf PATH`` (a Python 3.12 venv) the same for
inference-perf (completions API: its chat API is not supported by its random data generator).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.loadgen import run_benchmark
from lmmbench.loadgen.arrivals import arrival_offsets_ns
from lmmbench.testing import running_testserver
from lmmbench.testing.fixtures import server_stats


def _one(url: str, rate: float, args: argparse.Namespace, workers: int, seed: int) -> dict[str, Any]:
    cfg = PerfConfig(
        url=url, model="test-model", rate=rate, arrival="poisson", duration_s=args.duration_s,
        output_tokens=args.output_tokens, input_tokens=32, workers=workers, progress=False, plots=False,
        seed=seed, warmup_requests=20, loop=args.loop,
    )  # fmt: skip
    load_before = os.getloadavg()[0]
    server_cpu0 = server_stats(url).get("cpu_s", 0.0)
    res = run_benchmark(cfg)
    server_cpu = server_stats(url).get("cpu_s", 0.0) - server_cpu0
    s, m = res.summary, res.summary["metrics"]
    offs = arrival_offsets_ns("poisson", rate, duration_s=args.duration_s, seed=seed)
    scheduled_rate = (len(offs) - 1) / (offs[-1] / 1e9)
    rate_err = abs(s["send_rate_rps"] - scheduled_rate) / scheduled_rate
    clean = rate_err <= 0.02 and m["lateness_ms"]["p99"] <= 1.0 and s["errors"] == 0 and s["not_sent"] == 0
    return {
        "rate": rate, "workers": workers, "requests": s["requests"], "errors": s["errors"],
        "send_rate_rps": s["send_rate_rps"], "scheduled_rate_rps": scheduled_rate, "rate_error": rate_err,
        "lateness_p50_ms": m["lateness_ms"]["p50"], "lateness_p99_ms": m["lateness_ms"]["p99"],
        "ttft_mean_ms": m["ttft_ms"]["mean"], "ttft_send_mean_ms": m["ttft_send_ms"]["mean"],
        "ttft_overhead_ms": m["ttft_ms"]["mean"] - args.ttft_ms,
        "ttft_send_overhead_ms": m["ttft_send_ms"]["mean"] - args.ttft_ms,
        "itl_mean_ms": m["itl_ms"]["mean"], "new_connections": s["new_connections"],
        "client_cpu_us_per_request": res.client_cpu_s / max(s["requests"], 1) * 1e6,
        "server_cpu_us_per_request": server_cpu / max(s["requests"] + 20, 1) * 1e6,
        "clean": clean, "loadavg_before": load_before, "loadavg_after": os.getloadavg()[0],
    }  # fmt: skip


def _aiperf(exe: str, url: str, rate: float, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One aiperf run at ``rate`` for about ``duration_s``; its TTFT, ITL and throughput."""
    import subprocess
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="aiperf-"))
    cmd = [exe, "profile", "--model", "test-model", "--url", url, "--endpoint-type", "chat", "--streaming",
           "--request-rate", str(rate), "--request-count", str(int(rate * args.duration_s)),
           "--prompt-input-tokens-mean", "32", "--output-tokens-mean", str(args.output_tokens),
           "--tokenizer", str(args.peer_tokenizer), "--use-server-token-count", "--artifact-dir", str(out),
           "--ui-type", "none", "--random-seed", str(seed)]  # fmt: skip
    load_before = os.getloadavg()[0]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    try:
        d = json.loads((out / "profile_export_aiperf.json").read_text())
    except (OSError, ValueError):
        return {"tool": "aiperf", "rate": rate, "error": proc.stderr[-500:]}
    shutil.rmtree(out, ignore_errors=True)
    return {
        "tool": "aiperf", "rate": rate, "repeat": seed, "request_throughput": d["request_throughput"]["avg"],
        "ttft_mean_ms": d["time_to_first_token"]["avg"],
        "ttft_overhead_ms": d["time_to_first_token"]["avg"] - args.ttft_ms,
        "itl_mean_ms": d["inter_token_latency"]["avg"], "loadavg_before": load_before,
    }  # fmt: skip


def _inference_perf(exe: str, url: str, rate: float, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One inference-perf run (poisson, completions API, streamed) at ``rate``."""
    import subprocess
    import tempfile

    import yaml

    out = Path(tempfile.mkdtemp(prefix="inference-perf-"))
    n_out = args.output_tokens
    cfg = {
        "load": {"type": "poisson", "stages": [{"rate": rate, "duration": args.duration_s}], "base_seed": seed},
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": "test-model", "base_url": url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(args.peer_tokenizer)},
        "data": {"type": "random", "input_distribution": {"min": 32, "max": 32, "mean": 32},
                 "output_distribution": {"min": n_out, "max": n_out, "mean": n_out}},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True}},
        "storage": {"local_storage": {"path": str(out / "report")}},
    }  # fmt: skip
    (out / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    load_before = os.getloadavg()[0]
    proc = subprocess.run([exe, "-c", str(out / "cfg.yaml")], capture_output=True, text=True, timeout=600)
    try:
        d = json.loads((out / "report" / "stage_0_lifecycle_metrics.json").read_text())
    except (OSError, ValueError):
        return {"tool": "inference-perf", "rate": rate, "error": proc.stderr[-500:]}
    shutil.rmtree(out, ignore_errors=True)
    lat = d["successes"]["latency"]
    return {
        "tool": "inference-perf", "rate": rate, "repeat": seed,
        "request_throughput": d["successes"]["throughput"]["requests_per_sec"],
        "achieved_send_rate": d["load_summary"]["achieved_rate"],
        "schedule_delay_mean_ms": d["load_summary"]["schedule_delay"]["mean"] * 1e3,
        "ttft_mean_ms": lat["time_to_first_token"]["mean"] * 1e3,
        "ttft_overhead_ms": lat["time_to_first_token"]["mean"] * 1e3 - args.ttft_ms,
        "itl_mean_ms": lat["inter_token_latency"]["mean"] * 1e3, "loadavg_before": load_before,
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="100,200,300,400,500,600,800,1000,1200")
    p.add_argument("--workers", default="1,2", help="client process counts to compare")
    p.add_argument("--server-workers", type=int, default=1)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    p.add_argument("--aiperf", default=None, help="aiperf executable (e.g. from a throwaway venv)")
    p.add_argument("--inference-perf", default=None, help="inference-perf executable (Python >= 3.12 venv)")
    p.add_argument("--peer-tokenizer", default=None, help="local HF tokenizer directory for aiperf")
    p.add_argument("--out", type=Path, default=Path("loadgen_capacity.json"))
    args = p.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    worker_counts = [int(x) for x in args.workers.split(",")]
    scfg = TestServerConfig(port=free_loopback_port(), ttft_ms=args.ttft_ms, itl_ms=args.itl_ms,
                            output_tokens=args.output_tokens, workers=args.server_workers)  # fmt: skip
    runs: list[dict[str, Any]] = []
    peer_runs: list[dict[str, Any]] = []
    with running_testserver(scfg) as url:
        for rep in range(args.repeats):
            for workers in worker_counts:
                fails = 0
                for rate in rates:
                    r = _one(url, rate, args, workers, seed=rep)
                    r["repeat"] = rep
                    runs.append(r)
                    print(f"rep {rep} workers {workers} rate {rate:6.0f}: sent {r['send_rate_rps']:7.1f}/s "
                          f"late p99 {r['lateness_p99_ms']:6.3f} ms  TTFT +{r['ttft_overhead_ms']:.2f} ms "
                          f"(send +{r['ttft_send_overhead_ms']:.2f})  errors {r['errors']}  "
                          f"{'clean' if r['clean'] else 'NOT clean'}  load {r['loadavg_before']:.1f}  "
                          f"cpu/req client {r['client_cpu_us_per_request']:.0f} us "
                          f"server {r['server_cpu_us_per_request']:.0f} us",
                          flush=True)  # fmt: skip
                    # stop climbing once the client cannot even keep the average rate
                    fails = fails + 1 if r["rate_error"] > 0.05 or r["errors"] else 0
                    if fails >= 2:
                        break
            for tool, exe, fn in (("aiperf", args.aiperf, _aiperf), ("inference-perf", args.inference_perf,
                                                                      _inference_perf)):  # fmt: skip
                if not exe:
                    continue
                for rate in (200.0, 400.0):
                    a = fn(exe, url, rate, args, rep)
                    peer_runs.append(a)
                    print(f"rep {rep} {tool} rate {rate:6.0f}: {a}", flush=True)
    summary: dict[str, Any] = {}
    for workers in worker_counts:
        best = []
        for rep in range(args.repeats):
            clean = [r["rate"] for r in runs if r["workers"] == workers and r["repeat"] == rep and r["clean"]]
            best.append(max(clean, default=0.0))
        entry: dict[str, Any] = {"highest_clean_rate_median": statistics.median(best), "per_repeat": best}
        mine = [r for r in runs if r["workers"] == workers]
        entry["client_cpu_us_per_request_median"] = statistics.median(r["client_cpu_us_per_request"] for r in mine)
        entry["server_cpu_us_per_request_median"] = statistics.median(r["server_cpu_us_per_request"] for r in mine)
        entry["loadavg_median"] = statistics.median(r["loadavg_before"] for r in mine)
        for rate in (200.0, 400.0):
            sel = [r for r in runs if r["workers"] == workers and r["rate"] == rate]
            if sel:
                entry[f"ttft_overhead_ms_at_{int(rate)}"] = statistics.median(r["ttft_overhead_ms"] for r in sel)
                entry[f"ttft_send_overhead_ms_at_{int(rate)}"] = statistics.median(
                    r["ttft_send_overhead_ms"] for r in sel
                )
        summary[f"lmmbench workers={workers}"] = entry
    peers: dict[str, Any] = {}
    for tool, exe in (("aiperf", args.aiperf), ("inference-perf", args.inference_perf)):
        if not exe:
            peers[tool] = "not run"
            continue
        peer: dict[str, Any] = {}
        for rate in (200.0, 400.0):
            sel = [a for a in peer_runs if a["tool"] == tool and a["rate"] == rate and "error" not in a]
            if sel:
                peer[f"ttft_overhead_ms_at_{int(rate)}"] = statistics.median(a["ttft_overhead_ms"] for a in sel)
                peer[f"itl_mean_ms_at_{int(rate)}"] = statistics.median(a["itl_mean_ms"] for a in sel)
                peer[f"throughput_at_{int(rate)}"] = statistics.median(a["request_throughput"] for a in sel)
        peers[tool] = peer
    report = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "settings": vars(args) | {"out": str(args.out)},
        "summary": summary,
        "peers": peers,
        "runs": runs,
        "peer_runs": peer_runs,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({"summary": summary, "peers": peers}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
