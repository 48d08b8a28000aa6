"""Output tokens/s and TTFT p50 of `lmmbench serve` against `transformers serve`, same tiny-llm, CPU.

Starts the servers (lmmbench serve; transformers serve without and with --continuous-batching,
the latter with the small paged cache FIELD-NOTES recommends on CPU), then measures every
(server, concurrency) point with lmmbench's load generator (closed loop, streamed chat requests,
greedy, the same synthetic prompts for every server), interleaving servers inside each repeat so a
noisy machine hurts them alike. Rows go to ``<out>/serve_throughput_results.jsonl`` as they are
measured; medians and ratios to ``<out>/serve_throughput_summary.json`` and stdout (Markdown).

    .venv/bin/python benchmarks/serve_throughput.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.loadgen import run_benchmark
from lmmbench.models import build_tiny_model

BIN = Path(sys.executable).parent


def server_command(spec: str, model_dir: Path, port: int, max_batch: int) -> list[str]:
    """The command line that starts server ``spec`` (``kind`` or ``kind:extra args``) on ``port``."""
    kind, _, extra = spec.partition(":")
    return _base_command(kind, model_dir, port, max_batch) + extra.split()


def _base_command(kind: str, model_dir: Path, port: int, max_batch: int) -> list[str]:
    if kind == "lmmbench":
        return [
            str(BIN / "lmmbench"), "serve", "--model", str(model_dir), "--served-model-name", str(model_dir),
            "--port", str(port), "--max-batch-size", str(max_batch), "--max-queue", "256",
        ]  # fmt: skip
    cmd = [
        str(BIN / "transformers"), "serve", str(model_dir), "--device", "cpu", "--host", "127.0.0.1",
        "--port", str(port), "--dtype", "float32",
    ]  # fmt: skip
    if kind == "transformers-cb":
        cmd += ["--continuous-batching", "--cb-num-blocks", "256", "--cb-block-size", "32"]
    return cmd


def start_server(
    kind: str, model_dir: Path, out: Path, max_batch: int, hf_home: Path, threads: int | None
) -> tuple[Any, str]:
    """Start a server and wait for /health; returns (process, base url)."""
    port = free_loopback_port()
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
    if threads is not None:  # the same CPU thread count for every server (torch reads it at start)
        env["OMP_NUM_THREADS"] = str(threads)
    log = (out / f"server_{kind.replace(':', '_').replace(' ', '_')}.log").open("w")
    proc = subprocess.Popen(
        server_command(kind, model_dir, port, max_batch), stdout=log, stderr=subprocess.STDOUT, env=env
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with {proc.returncode}; see {log.name}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"{kind} did not answer /health within 180 s")


def measure(url: str, model_dir: Path, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    """One load point: output tokens/s and TTFT percentiles."""
    cfg = PerfConfig(
        url=url, model=str(model_dir), endpoint="chat", dataset="synthetic", tokenizer=model_dir,
        input_tokens=args.input_tokens, output_tokens=args.output_tokens, ignore_eos=False,
        extra_body={"temperature": 0}, concurrency=concurrency,
        num_requests=max(args.min_requests, args.requests_per_client * concurrency),
        warmup_requests=concurrency, progress=False, plots=False, seed=args.seed,
    )  # fmt: skip
    s = run_benchmark(cfg).summary
    return {
        "ok": s["ok"],
        "errors": s["errors"],
        "output_tok_s": s["output_token_throughput"],
        "ttft_p50_ms": s["metrics"]["ttft_ms"]["p50"],
        "ttft_p90_ms": s["metrics"]["ttft_ms"]["p90"],
        "tpot_p50_ms": s["metrics"]["tpot_ms"]["p50"],
        "mean_output_tokens": s["metrics"]["output_tokens"]["mean"],
        "token_sources": s["token_sources"],
    }


def summarize(rows: list[dict[str, Any]], servers: list[str], concurrencies: list[int]) -> dict[str, Any]:
    """Medians per (server, concurrency) and lmmbench / peer ratios of the medians."""
    med: dict[str, dict[str, Any]] = {}
    for srv in servers:
        for c in concurrencies:
            pts = [r for r in rows if r["server"] == srv and r["concurrency"] == c and r["ok"] > 0]
            if pts:
                med[f"{srv}@{c}"] = {
                    "server": srv, "concurrency": c, "runs": len(pts),
                    "output_tok_s": statistics.median(r["output_tok_s"] for r in pts),
                    "ttft_p50_ms": statistics.median(r["ttft_p50_ms"] for r in pts),
                    "errors": sum(r["errors"] for r in pts),
                }  # fmt: skip
    ratios: dict[str, float] = {}
    for c in concurrencies:
        ours = med.get(f"lmmbench@{c}")
        for peer in servers:
            theirs = med.get(f"{peer}@{c}")
            if peer != "lmmbench" and ours and theirs and theirs["output_tok_s"] > 0:
                ratios[f"tok_s lmmbench/{peer}@{c}"] = ours["output_tok_s"] / theirs["output_tok_s"]
    return {"medians": med, "ratios": ratios}


def markdown(summary: dict[str, Any], servers: list[str], concurrencies: list[int]) -> str:
    """The table for docs/benchmarks.md."""
    lines = [
        "| server | concurrency | output tok/s (median) | TTFT p50 ms (median) | lmmbench tok/s ratio |",
        "|---|---|---|---|---|",
    ]
    for c in concurrencies:
        for srv in servers:
            m = summary["medians"].get(f"{srv}@{c}")
            if not m:
                continue
            ratio = summary["ratios"].get(f"tok_s lmmbench/{srv}@{c}")
            lines.append(
                f"| {srv} | {c} | {m['output_tok_s']:.0f} | {m['ttft_p50_ms']:.1f} | "
                f"{'' if ratio is None else f'{ratio:.1f}x'} |"
            )
    return "\n".join(lines)


def kv_layout_comparison(repeats: int) -> None:
    """Engine only, batch 16: the persistent right-aligned cache vs re-stacking per-request caches each step."""
    import random

    import torch
    from transformers import DynamicCache

    from lmmbench.engines import BatchEngine, GenerationRequest, SamplingParams, TransformersEngine
    from lmmbench.engines.kv_cache import BatchKVCache
    from lmmbench.models import load_model

    torch.set_num_threads(1)
    loaded = load_model("tiny-llm")

    class RestackEngine(TransformersEngine):
        """One cache per request, stacked (left-padded) before every decode and split again."""

        def decode(self, states: Any) -> Any:
            kv, fresh = self.kv, BatchKVCache()
            for i, rid in enumerate(list(kv.row_ids)):
                start = int((kv.mask[i] == 0).sum())
                own = DynamicCache(config=self.model.config)
                for src, dst in zip(kv.cache.layers, own.layers, strict=True):
                    dst.update(src.keys[i : i + 1, :, start:].clone(), src.values[i : i + 1, :, start:].clone())
                fresh.join(own, kv.mask[i : i + 1, start:].clone(), [rid])
            self.kv = fresh
            return super().decode(states)

    def run(engine_cls: Any) -> tuple[float, list[list[int]]]:
        engine = BatchEngine(engine_cls(loaded), max_batch_size=16)
        rng = random.Random(0)
        speeds, tokens = [], []
        for rep in range(repeats + 1):
            reqs = [
                GenerationRequest(
                    prompt_token_ids=[rng.randrange(5, 1000) for _ in range(rng.randrange(16, 128))],
                    sampling=SamplingParams(max_tokens=64, ignore_eos=True),
                )
                for _ in range(16)
            ]
            t0 = time.perf_counter()
            outs = engine.generate_many(reqs)
            if rep:  # the first is warm-up
                speeds.append(16 * 64 / (time.perf_counter() - t0))
            tokens = [o.token_ids for o in outs]
        return statistics.median(speeds), tokens

    persistent, tok_a = run(TransformersEngine)
    restack, tok_b = run(RestackEngine)
    print(
        f"persistent right-aligned cache {persistent:.0f} tok/s; re-stacked every step {restack:.0f} tok/s; "
        f"ratio {persistent / restack:.2f}; same tokens: {tok_a == tok_b}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="lmmbench,transformers,transformers-cb")
    ap.add_argument("--concurrency", default="1,8,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests-per-client", type=int, default=3)
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--input-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--max-batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for every server")
    ap.add_argument("--out", type=Path, default=Path("lmmbench-results/serve_throughput"))
    ap.add_argument("--kv-layout", action="store_true", help="only compare KV cache layouts, engine only")
    args = ap.parse_args()
    if args.kv_layout:
        kv_layout_comparison(args.repeats)
        return 0
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = build_tiny_model("tiny-llm")
    hf_home = Path(tempfile.mkdtemp(prefix="hf_home_"))
    (hf_home / "hub").mkdir()  # transformers serve's /v1/models needs the cache dir to exist
    procs: dict[str, tuple[Any, str]] = {}
    rows: list[dict[str, Any]] = []
    results = (args.out / "serve_throughput_results.jsonl").open("a")
    try:
        for srv in servers:
            procs[srv] = start_server(srv, model_dir, args.out, args.max_batch_size, hf_home, args.threads)
            print(f"started {srv} at {procs[srv][1]}", file=sys.stderr, flush=True)
        for rep in range(args.repeats):
            for c in concurrencies:
                for srv in servers:
                    row = {"server": srv, "concurrency": c, "repeat": rep, **measure(procs[srv][1], model_dir, c, args)}
                    rows.append(row)
                    results.write(json.dumps(row) + "\n")
                    results.flush()
                    print(
                        f"rep {rep} c={c:>2} {srv:<16} {row['output_tok_s']:8.1f} tok/s  "
                        f"TTFT p50 {row['ttft_p50_ms']:8.1f} ms  ok {row['ok']} err {row['errors']}",
                        file=sys.stderr, flush=True,
                    )  # fmt: skip
    finally:
        results.close()
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    summary = summarize(rows, servers, concurrencies)
    summary["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (args.out / "serve_throughput_summary.json").write_text(json.dumps(summary, indent=2))
    print(markdown(summary, servers, concurrencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
