"""GPU truth: the checks that only a CUDA machine can answer, one verdict line each, in priority order.

    python benchmarks/gpu_check.py --out gpu-check            # on a CUDA machine (about 20 min)
    python benchmarks/gpu_check.py --cpu-smoke --out smoke    # the cheap subset on CPU, tiny models only

Priority order (a check that runs out of the time budget is reported as SKIP, never silently dropped):
 1. pi0 (about a minute): ms per action-expert call of the full `pi0` shape in bf16 at N = 1, 2, 4, 8, 16, eager
    and replayed from CUDA graphs, the speed-up, graphed == eager, and the ratio to the call's memory-traffic
    bound (``lmmbench.models.vla_bench``; the card's bandwidth from its table, or --bandwidth-tb-s);
 2. ttft-breakdown and token-scaling on tiny-omni, tiny-vl and shape:qwen2.5-omni-7b: media tokens in
    every media row, timer cuda_event, stage sums exact, unattributed <= 5 %, CV of the repeats; the
    visual-encoder fit (ms per visual token, R²);
 3. `lmmbench serve` + `lmmbench perf` at concurrency 1, 16, 64 on shape:qwen2.5-7b against
    `transformers serve --continuous-batching`: output tokens/s ratio;
 4. oom-boundary on shape:qwen2.5-omni-7b with a 32 GB budget (sdpa, then the eager setting of the
    Qwen2.5-Omni TTFT study);
 5. eval and `reference compare` on tiny-llm (CUDA bf16 against a CPU fp32 reference);
 6. model-bench on shape:qwen2.5-7b;
 7. served (a few minutes): the closed loop three ways on the same seeds (``benchmarks/served_three_way.py``:
    ``serve-policy`` batching N connections, in-process ``--num-parallel N``, N serial connections), the toy
    policy on the device; outcomes equal, wall times and speed-ups with their spread; pi0 on Push-T the same way
    where gym-pusht is installed (SKIP otherwise), LeRobot's policies SKIP (they need lerobot's own venv).
 8. libero-workers: LIBERO-Object with --env-workers at N = 1, 4, 8 and W = 0, 2, cores: steps/s and speed-ups
    (INFO; SKIP where libero / mujoco / robosuite cannot be imported; benchmarks/gpu_check_episodic.py).
``--only pi0,eval`` runs only those (names: pi0, breakdown, serve, oom, eval, model-bench, served, libero-workers).

Every verdict line goes to stdout and ``<out>/verdicts.txt`` the moment it is known; each command's
output goes to ``<out>/logs/``. Exit 2 without a CUDA device (unless --cpu-smoke), 1 when a check
failed, 0 otherwise. See docs/benchmarks.md, "GPU check".
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STAGE_PARTS = ("visual_encoder_ms", "audio_encoder_ms", "prefill_ms")
UNATTRIBUTED_GOAL_PCT = 5.0
CV_GOAL_PCT = 10.0


@dataclass
class Verdict:
    """One line of the report: check, what was checked, PASS / FAIL / INFO / SKIP, the numbers."""

    check: str
    name: str
    status: str
    detail: str

    def line(self) -> str:
        return f"{self.status:4s} {self.check} | {self.name}: {self.detail}"


def verdict(check: str, name: str, ok: bool | None, detail: str) -> Verdict:
    """PASS / FAIL for a goal, INFO for a number without a goal (ok None)."""
    return Verdict(check, name, "INFO" if ok is None else "PASS" if ok else "FAIL", detail)


@dataclass
class Settings:
    """What the mode (CUDA or --cpu-smoke) changes."""

    device: str
    dtype: str
    breakdown_models: list[str]
    limit: int
    repeats: int
    scaling_args: list[str]
    perf_model: str
    concurrencies: list[int]
    oom_args: list[list[str]]
    oom_model: str
    eval_dtype: str
    timer: str
    extra: dict[str, Any] = field(default_factory=dict)
    pi0_shape: str = "pi0"
    pi0_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    pi0_repeats: int = 10
    served_args: list[str] = field(default_factory=lambda: ["--n", "16", "--num-tasks", "16",
                                                            "--num-trials-per-task", "2", "--repeats", "5"])


def settings(cpu_smoke: bool) -> Settings:
    """The CUDA run, or the cheap CPU subset that exercises the same plumbing."""
    if cpu_smoke:
        return Settings(
            device="cpu", dtype="float32", breakdown_models=["tiny-omni", "tiny-vl"], limit=2, repeats=2,
            scaling_args=["--frames", "2,4", "--image-sizes", "", "--audio-seconds", "", "--text-words", ""],
            perf_model="tiny-llm", concurrencies=[1, 4],
            oom_args=[["--max-s", "8"]], oom_model="tiny-omni", eval_dtype="bfloat16", timer="perf_counter_ns",
            pi0_shape="pi0-tiny", pi0_sizes=[1, 2], pi0_repeats=2,
            served_args=["--n", "4", "--num-tasks", "4", "--num-trials-per-task", "1", "--max-steps", "12",
                         "--repeats", "2", "--warmup-rounds", "0"])
    budget = ["--memory-budget-gb", "32", "--frame-size", "448", "--video-fps", "2"]
    return Settings(
        device="cuda", dtype="bfloat16", breakdown_models=["tiny-omni", "tiny-vl", "shape:qwen2.5-omni-7b"],
        limit=6, repeats=5, scaling_args=["--frames", "2,4,8,16,32", "--audio-seconds", "", "--text-words", ""],
        perf_model="shape:qwen2.5-7b", concurrencies=[1, 16, 64],
        oom_args=[[*budget, "--max-s", "256", "--resolution-s", "8"],
                  [*budget, "--attn-implementation", "eager", "--start-s", "8", "--max-s", "64",
                   "--resolution-s", "4"]],
        oom_model="shape:qwen2.5-omni-7b", eval_dtype="bfloat16", timer="cuda_event")


class Reporter:
    """Prints and appends every verdict at once; counts failures; knows the time budget."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.path = out / "verdicts.txt"
        self.deadline = time.monotonic() + budget_s
        self.failed = 0

    def add(self, v: Verdict) -> None:
        self.failed += v.status == "FAIL"
        print(v.line(), flush=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(v.line() + "\n")

    def left_s(self) -> float:
        return self.deadline - time.monotonic()


def lmmbench(args: list[str], log: Path, timeout_s: float) -> int:
    """Run the lmmbench CLI (this tree's src/ first on the path); output to ``log``; the exit code."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as fh:
        fh.write("$ lmmbench " + " ".join(args) + "\n")
        fh.flush()
        try:
            return subprocess.run([sys.executable, "-m", "lmmbench.cli.main", *args], stdout=fh,
                                  stderr=subprocess.STDOUT, env=env, timeout=max(1.0, timeout_s)).returncode
        except subprocess.TimeoutExpired:
            fh.write(f"\n[gpu_check] killed after {timeout_s:.0f} s\n")
            return 124


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def media_tokens_ok(row: dict[str, str]) -> str | None:
    """None when every medium of the row reached the model, else what is missing."""
    mods = row.get("modalities", "")
    missing = []
    if ("video" in mods or "image" in mods) and not _num(row.get("visual_tokens")) > 1:
        missing.append(f"visual_tokens={row.get('visual_tokens')}")
    if "audio" in mods and not (_num(row.get("audio_tokens")) > 0 and _num(row.get("mel_frames")) > 0):
        missing.append(f"audio_tokens={row.get('audio_tokens')} mel_frames={row.get('mel_frames')}")
    return "; ".join(missing) or None


PREFILL_PARTS = ("llm_prefill_ms", "prefill_merge_ms", "prefill_rope_index_ms", "prefill_lm_head_ms",
                 "prefill_forward_glue_ms")


def stage_sum_error_ms(row: dict[str, str]) -> float:
    """Worst of |visual + audio + prefill + others - ttft| (the TTFT study's stages), |sum of the others_*
    parts - others| and |sum of the prefill parts - prefill| (an empty glue cell: a layout without a
    multimodal wrapper, whose forward's own code is the merge)."""
    parts = [k for k in row if k.startswith("others_") and k.endswith("_ms") and k != "others_ms"]
    top = sum(_num(row.get(k)) for k in (*STAGE_PARTS, "others_ms")) - _num(row.get("ttft_ms"))
    inner = sum(_num(row.get(k)) for k in parts) - _num(row.get("others_ms"))
    errors = [abs(top), abs(inner)]
    if "prefill_merge_ms" in row:
        pre = [_num(row.get(k)) for k in PREFILL_PARTS]
        errors.append(abs(sum(x for x in pre if math.isfinite(x)) - _num(row.get("prefill_ms"))))
    return max(errors)


def study_timer_error_ms(row: dict[str, str]) -> float:
    """|prefill timed the study's way (first forward minus the encoders in it) - the parts inside that forward|."""
    inside = _num(row.get("prefill_ms")) - _num(row.get("prefill_outside_forward_ms"))
    return abs(_num(row.get("prefill_study_timer_ms")) - inside)


def breakdown_verdicts(check: str, rows: list[dict[str, str]], analysis: dict[str, Any], timer: str,
                       cv_is_goal: bool = True) -> list[Verdict]:
    """The verdicts of one ttft-breakdown run, from its results rows and analysis (CV: a goal on a GPU,
    a number on a shared CPU)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    out = [verdict(check, "rows", bool(ok) and len(ok) == len(rows), f"{len(ok)} ok of {len(rows)}")]
    if not ok:
        return out
    media = [r for r in ok if any(m in r.get("modalities", "") for m in ("video", "image", "audio"))]
    bad = [(r.get("sample_id"), media_tokens_ok(r)) for r in media if media_tokens_ok(r)]
    out.append(verdict(check, "media tokens in every media row", bool(media) and not bad,
                       f"{len(media) - len(bad)}/{len(media)} media rows" + (f"; first bad {bad[0]}" if bad else "")))
    timers = sorted({r.get("timer", "") for r in ok})
    out.append(verdict(check, f"timer {timer}", timers == [timer], f"timers seen: {', '.join(timers)}"))
    worst = max(stage_sum_error_ms(r) for r in ok)
    tol = max(0.01, 1e-4 * max(_num(r.get("ttft_ms")) for r in ok))  # the CSV keeps 6 significant digits
    out.append(verdict(check, "stage sums exact", worst <= tol, f"worst |sum - ttft| {worst:.4g} ms (tol {tol:.3g})"))
    timed = [r for r in ok if math.isfinite(_num(r.get("prefill_study_timer_ms")))]
    if timed:  # two timers' marks a hook's code apart: microseconds; 1 % of prefill leaves room for a launch
        gap = max(study_timer_error_ms(r) for r in timed)
        tol_s = max(0.05, 0.01 * max(_num(r.get("prefill_ms")) for r in timed))
        out.append(verdict(check, "study-style prefill timer agrees", gap <= tol_s,
                           f"worst |timer - parts inside the forward| {gap:.4g} ms (tol {tol_s:.3g})"))
    worst_row = max(_num(r.get("unattributed_pct")) for r in ok)
    per_sample = _num((analysis.get("unattributed") or {}).get("max_pct_per_sample"))
    una = per_sample if math.isfinite(per_sample) else worst_row  # the spec's own goal: medians per sample
    out.append(verdict(check, f"unattributed <= {UNATTRIBUTED_GOAL_PCT:g} %", una <= UNATTRIBUTED_GOAL_PCT,
                       f"worst sample (median of its repeats) {una:.2f} %, worst single row {worst_row:.2f} %"))
    noise = (analysis.get("repeat_noise") or {}).get("per_field", {}).get("ttft_ms")
    if noise:
        out.append(verdict(check, f"CV of repeats (ttft) <= {CV_GOAL_PCT:g} %",
                           noise["cv_pct_max"] <= CV_GOAL_PCT if cv_is_goal else None,
                           f"max {noise['cv_pct_max']:.1f} % (sample {noise['worst_sample']}), median "
                           f"{noise['cv_pct_median']:.1f} %"))
    return out


def fit_verdicts(check: str, analysis: dict[str, Any], keys: tuple[str, ...]) -> list[Verdict]:
    """Slope and R² of the named fits (INFO: a number to compare with the published study, not a goal)."""
    out = []
    for key in keys:
        fit = (analysis.get("fits") or {}).get(key)
        if fit and math.isfinite(_num(fit.get("r2"))):
            out.append(verdict(check, f"fit {key}", None, f"{fit['slope_ms_per_unit']:.4g} ms/unit, "
                               f"R² {fit['r2']:.3f}, {fit.get('n_samples')} points"))
    return out


def _run_spec(rep: Reporter, out: Path, s: Settings, spec: str, model: str, args: list[str]) -> Path | None:
    label = f"{spec}:{model}"
    spec_out = out / "runs" / model.replace(":", "_")
    rc = lmmbench(["run", spec, "--model", model, "--device", s.device, "--dtype", s.dtype,
                   "--out-dir", str(spec_out), "--no-progress", *args],
                  out / "logs" / f"{spec}_{model.replace(':', '_')}.log", rep.left_s())
    if rc != 0:
        rep.add(verdict(label, "exit code", False, f"{rc}; see logs/{spec}_{model.replace(':', '_')}.log"))
        return None
    return spec_out / spec


def check_breakdown(rep: Reporter, out: Path, s: Settings, model: str) -> None:
    """ttft-breakdown then token-scaling on ``model``."""
    d = _run_spec(rep, out, s, "ttft-breakdown", model, ["--limit", str(s.limit), "--repeats", str(s.repeats)])
    if d is not None:
        for v in breakdown_verdicts(f"ttft-breakdown:{model}", _read_csv(d / "ttft-breakdown_results.csv"),
                                    _read_json(d / "ttft-breakdown_analysis.json"), s.timer,
                                    cv_is_goal=s.device == "cuda"):
            rep.add(v)
        rep.add(verdict(f"ttft-breakdown:{model}", "random weights recorded", None,
                        str(_read_json(d / "run.json").get("random_weights"))))
    d = _run_spec(rep, out, s, "token-scaling", model, ["--repeats", "2", *s.scaling_args])
    if d is not None:
        rows = _read_csv(d / "token-scaling_results.csv")
        analysis = _read_json(d / "token-scaling_analysis.json")
        rep.add(verdict(f"token-scaling:{model}", "rows", bool(rows) and all(r["status"] == "ok" for r in rows),
                        f"{sum(r['status'] == 'ok' for r in rows)} ok of {len(rows)}"))
        for v in fit_verdicts(f"token-scaling:{model}", analysis,
                              ("visual_encoder_ms~visual_tokens", "llm_prefill_ms~total_tokens")):
            rep.add(v)


def _server_cmd(kind: str, model_dir: Path, port: int, s: Settings) -> list[str]:
    if kind == "lmmbench":
        return [sys.executable, "-m", "lmmbench.cli.main", "serve", "--model", str(model_dir), "--device", s.device,
                "--dtype", s.dtype, "--port", str(port), "--served-model-name", "m",
                "--max-batch-size", str(max(s.concurrencies)), "--max-queue", "512"]
    cmd = [str(Path(sys.executable).parent / "transformers"), "serve", str(model_dir), "--device", s.device,
           "--dtype", s.dtype, "--host", "127.0.0.1", "--port", str(port), "--continuous-batching"]
    if s.device == "cpu":  # FIELD-NOTES: the default paged cache takes 7.4 GB on CPU
        cmd += ["--cb-num-blocks", "256", "--cb-block-size", "32"]
    return cmd


def _start_server(kind: str, model_dir: Path, s: Settings, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    from lmmbench.core.net import free_loopback_port

    port = free_loopback_port()
    hf_home = log.parent / "hf_home"
    (hf_home / "hub").mkdir(parents=True, exist_ok=True)  # transformers serve's /v1/models wants it
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen(_server_cmd(kind, model_dir, port, s), stdout=fh, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    _stop(proc)
    raise RuntimeError(f"{kind} server did not answer /health within 300 s; see {log}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _perf_point(url: str, model: str, model_dir: Path, concurrency: int) -> dict[str, Any]:
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.loadgen import run_benchmark

    cfg = PerfConfig(url=url, model=model, endpoint="chat", dataset="synthetic", tokenizer=model_dir,
                     input_tokens=128, output_tokens=64, ignore_eos=False,  # transformers serve: 422 on ignore_eos
                     extra_body={"temperature": 0}, concurrency=concurrency,
                     num_requests=max(8, 2 * concurrency), warmup_requests=concurrency, progress=False, plots=False)
    return dict(run_benchmark(cfg).summary)


def _model_dir(model: str, s: Settings, out: Path, rep: Reporter) -> Path:
    if model.startswith("shape:"):
        from lmmbench.models.shapes import shape_model_dir

        lmmbench(["models", "build", model, "--device", s.device, "--dtype", s.dtype],
                 out / "logs" / "build_perf_model.log", rep.left_s())
        return shape_model_dir(model)
    from lmmbench.models import build_tiny_model

    return build_tiny_model(model)


def check_serve_perf(rep: Reporter, out: Path, s: Settings) -> None:
    """Output tokens/s of lmmbench serve and transformers serve --continuous-batching per concurrency."""
    check = f"serve+perf:{s.perf_model}"
    model_dir = _model_dir(s.perf_model, s, out, rep)
    tok_s: dict[tuple[str, int], float] = {}
    for kind, name in (("lmmbench", "m"), ("transformers-cb", str(model_dir))):
        try:
            proc, url = _start_server(kind, model_dir, s, out / "logs" / f"server_{kind}.log")
        except RuntimeError as exc:
            rep.add(verdict(check, f"{kind} server", False, str(exc)))
            continue
        try:
            for c in s.concurrencies:
                summary = _perf_point(url, name, model_dir, c)
                tok_s[(kind, c)] = float(summary["output_token_throughput"])
                ttft = summary["metrics"]["ttft_ms"]["p50"]
                rep.add(verdict(check, f"{kind} @ concurrency {c}", summary["ok"] > 0 and summary["errors"] == 0,
                                f"{summary['ok']} ok, {summary['errors']} errors, {tok_s[(kind, c)]:.1f} output tok/s, "
                                f"TTFT p50 {ttft:.1f} ms"))
        finally:
            _stop(proc)
    for c in s.concurrencies:
        ours, theirs = tok_s.get(("lmmbench", c)), tok_s.get(("transformers-cb", c))
        if ours and theirs:
            rep.add(verdict(check, f"tokens/s ratio lmmbench/transformers-cb @ {c}", None, f"{ours / theirs:.2f}"))


def check_oom(rep: Reporter, out: Path, s: Settings) -> None:
    """oom-boundary in the sdpa setting, then the eager one; the boundary against the published one."""
    for i, args in enumerate(s.oom_args):
        setting = "eager" if "eager" in args else "auto (sdpa)"
        spec_dir = _run_spec(rep, out / f"oom{i}", s, "oom-boundary", s.oom_model, args)
        if spec_dir is None:
            continue
        a = _read_json(spec_dir / "oom-boundary_analysis.json")
        cmp_ = (a.get("published_comparison") or a.get("seed_comparison") or {}).get("this_run", {})
        ok = math.isfinite(_num(a.get("boundary_s"))) and _num(a.get("boundary_s")) > 0
        rep.add(verdict(f"oom-boundary:{s.oom_model}", f"boundary, attention {setting}", ok if ok else False,
                        f"{a.get('finding')}; tokens vs published "
                        f"x{_num(cmp_.get('tokens_vs_published', cmp_.get('tokens_vs_seed'))):.2f}"))


def check_eval_reference(rep: Reporter, out: Path, s: Settings) -> None:
    """eval on tiny-llm on the device; reference compare: the device's dtype against a CPU fp32 dump."""
    rc = lmmbench(["eval", "--model", "tiny-llm", "--tasks", "sample_mc", "--device", s.device, "--dtype",
                   s.eval_dtype, "--limit", "20", "--out-dir", str(out / "eval")], out / "logs" / "eval.log",
                  rep.left_s())
    rep.add(verdict("eval:tiny-llm", "exit code", rc == 0, f"{rc} (sample_mc, {s.device} {s.eval_dtype})"))
    ref = out / "reference_cpu_fp32"
    rc = lmmbench(["reference", "dump", "--model", "tiny-llm", "--device", "cpu", "--dtype", "float32",
                   "--num-prompts", "8", "--out", str(ref)], out / "logs" / "reference_dump.log", rep.left_s())
    if rc != 0:
        rep.add(verdict("reference:tiny-llm", "dump on CPU fp32", False, f"exit {rc}"))
        return
    cmp_dir = out / "reference_compare"
    rc = lmmbench(["reference", "compare", "--model", "tiny-llm", "--reference", str(ref), "--device", s.device,
                   "--dtype", s.eval_dtype, "--out-dir", str(cmp_dir)], out / "logs" / "reference_compare.log",
                  rep.left_s())
    acc = _read_json(cmp_dir / "report.json").get("Accuracy", {})
    logits = acc.get("Logits Diff", {})
    cos = _num(logits.get("Cosine Similarity"))
    rep.add(verdict("reference:tiny-llm", f"{s.device} {s.eval_dtype} vs cpu float32", rc == 0 and cos > 0.99,
                    f"logits max diff {_num(logits.get('Max Difference')):.3g}, cosine {cos:.6f}, token max diff "
                    f"{_num(acc.get('Token Diff', {}).get('Max Difference')):.3g}"))


def check_model_bench(rep: Reporter, out: Path, s: Settings) -> None:
    """model-bench (ByteMLPerf's bench_model.py): its matrices filled with positive means, timed by the device's
    timer (CUDA events on CUDA)."""
    model = s.perf_model
    d = _run_spec(rep, out, s, "model-bench", model, ["--seq-lens", "128,512", "--batch-sizes", "1,8",
                                                      "--budget-s", "1", "--max-iters", "20"])
    if d is None:
        return
    timer = _read_json(d / "config.json").get("timer")
    rep.add(verdict(f"model-bench:{model}", "timer", timer == s.timer, f"{timer} (expected {s.timer})"))
    for name in ("context_perf.csv", "decode_perf.csv"):
        with (d / name).open(newline="", encoding="utf-8") as fh:
            cells = [c for row in list(csv.reader(fh))[1:] for c in row[1:]]
        ok = bool(cells) and all(c and _num(c) > 0 for c in cells)
        rep.add(verdict(f"model-bench:{model}", name, ok, "mean ms " + ", ".join(cells)))


PI0_DIFF_TOL = 1e-5  # graphed vs eager: the batched-vs-serial tolerance of episodic-eval (the same kernels replay)


def _ms_spread(t: dict[str, Any]) -> str:
    if t.get("median") is None:
        return "not run"
    return f"{t['median']:.2f} ms ({t['min']:.2f}–{t['max']:.2f})"


def _x(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "null" if value is None else f"{value:.{digits}f}{unit}"


def pi0_verdicts(rows: list[dict[str, Any]], graphs_reason: str | None) -> list[Verdict]:
    """One INFO line per batch size (eager and graphed ms with min–max, speed-up, ratios to the traffic bound)
    and a PASS / FAIL for graphed == eager, or SKIP with ``graphs_reason`` when graphs were not run."""
    out = []
    for r in rows:
        check = f"pi0:N={r['batch_size']}"
        bound = "unknown bandwidth" if r["bound_ms"] is None else f"{r['bound_ms']:.3f} ms"
        out.append(verdict(check, "ms per AE call", None,
                           f"eager {_ms_spread(r['eager_ms'])}, graphed {_ms_spread(r['graphed_ms'])}, speed-up "
                           f"{_x(r['speedup'], 2, 'x')}, graph capture {_x(r['graph_setup_ms'], 1, ' ms')} "
                           "(not in the calls); "
                           f"traffic bound {bound} (weights {r['weight_bytes'] / 1e9:.3f} GB + KV "
                           f"{r['kv_bytes'] / 1e9:.3f} GB): eager {_x(r['eager_ratio_to_bound'], 1, 'x')}, graphed "
                           f"{_x(r['graphed_ratio_to_bound'], 1, 'x')} the bound"))
        if graphs_reason is not None:
            out.append(Verdict(check, "graphed == eager", "SKIP", graphs_reason))
        else:
            diff = r["max_abs_diff"]
            out.append(verdict(check, "graphed == eager", diff is not None and diff <= PI0_DIFF_TOL,
                               f"max |graphed - eager| {diff:.3g} (tol {PI0_DIFF_TOL:g})"))
    return out


def check_pi0(rep: Reporter, out: Path, s: Settings) -> None:
    """The action-expert call of ``s.pi0_shape`` at ``s.pi0_sizes``: eager, graphed (CUDA only), traffic bound."""
    import torch

    from lmmbench.models.vla import VLA_SHAPES
    from lmmbench.models.vla_bench import CARD_BANDWIDTH_TB_S, card_bandwidth_tb_s, time_ae_calls

    cuda = s.device == "cuda"
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    given = s.extra.get("bandwidth_tb_s")
    bandwidth = given or card_bandwidth_tb_s(name)
    source = ("--bandwidth-tb-s" if given else "table" if bandwidth else
              f"not in the table ({', '.join(t[1] for t in CARD_BANDWIDTH_TB_S)}); pass --bandwidth-tb-s")
    rep.add(verdict("pi0", "card bandwidth", None, f"{name}: {_x(bandwidth, 2, ' TB/s')} ({source})"))
    if not cuda:
        torch.set_num_threads(1)  # a shared CPU: one thread is steadier (FIELD-NOTES)
    dtype = getattr(torch, s.dtype)
    rows = time_ae_calls(VLA_SHAPES[s.pi0_shape], s.pi0_sizes, device=s.device, dtype=dtype, repeats=s.pi0_repeats,
                         graphs=cuda, bandwidth_tb_s=bandwidth)
    (out / "pi0_ae_calls.json").write_text(json.dumps({"shape": s.pi0_shape, "dtype": s.dtype, "device": name,
                                                        "bandwidth_tb_s": bandwidth, "rows": rows}, indent=1))
    for v in pi0_verdicts(rows, None if cuda else "CUDA graphs need a CUDA device (cpu-smoke: eager only)"):
        rep.add(v)
    if cuda:
        torch.cuda.empty_cache()


def load_sibling(name: str) -> Any:
    """benchmarks/<name>.py, loaded from beside this file (the benchmarks are scripts, not a package)."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # a dataclass in it looks its module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def check_served(rep: Reporter, out: Path, s: Settings) -> None:
    """The closed loop three ways (served batched, in-process, served serial) on the device, same seeds."""
    import importlib.util

    missing = [m for m in ("msgpack", "websockets") if importlib.util.find_spec(m) is None]
    if missing:
        rep.add(Verdict("served", "three ways", "SKIP", f"{', '.join(missing)} not installed: serve-policy's "
                        "protocol needs them (pip install 'lmmbench[episodes]', or carry their wheels)"))
        return
    module = load_sibling("served_three_way")
    base = [*s.served_args, "--device", s.device, "--threads", "1"]
    report = module.three_way(module.parser().parse_args([*base, "--policy", "toy", "--env", "toy-waypoints"]),
                              out / "served" / "toy")
    (out / "served_toy.json").write_text(json.dumps(report, indent=1, default=str))
    for check, name, ok, detail in module.verdicts("served:toy", report):
        rep.add(verdict(check, name, ok, detail))
    if s.device == "cpu":
        rep.add(Verdict("served:pi0", "pi0 on Push-T", "SKIP", "cpu-smoke runs the toy policy only"))
    elif importlib.util.find_spec("gym_pusht") is None:
        rep.add(Verdict("served:pi0", "pi0 on Push-T", "SKIP", "gym-pusht is not installed (pip install "
                        "'lmmbench[physics]'); the toy policy ran instead"))
    else:
        report = module.three_way(module.parser().parse_args([*base, "--policy", "pi0", "--env", "pusht",
                                                              "--max-steps", "24"]), out / "served" / "pi0")
        for check, name, ok, detail in module.verdicts("served:pi0", report):
            rep.add(verdict(check, name, ok, detail))
    rep.add(Verdict("served:lerobot", "LeRobot's ACT", "SKIP", "lerobot pins torch < 2.11 and huggingface-hub "
                    "< 0.36: it runs from its own venv (tests/episodes/test_served_lerobot.py), not in this one"))


def check_libero_workers(rep: Reporter, out: Path, s: Settings) -> None:
    """LIBERO with --env-workers (benchmarks/gpu_check_episodic.py)."""
    episodic = load_sibling("gpu_check_episodic")
    for status, check, name, detail in episodic.run_libero_workers(out, s.device, s.device == "cpu", rep.left_s):
        rep.add(Verdict(check, name, status, detail))


CHECK_GROUPS = ("pi0", "breakdown", "serve", "oom", "eval", "model-bench", "served", "libero-workers")


def plan(s: Settings, only: set[str] | None = None) -> list[tuple[str, Callable[[Reporter, Path, Settings], None]]]:
    """The checks, in priority order (``only``: these groups of ``CHECK_GROUPS``)."""
    steps = _plan(s)
    return [(label, step) for group, label, step in steps if only is None or group in only]


def _plan(s: Settings) -> list[tuple[str, str, Callable[[Reporter, Path, Settings], None]]]:
    steps: list[tuple[str, str, Callable[[Reporter, Path, Settings], None]]] = [
        ("pi0", f"pi0 action-expert call ({s.pi0_shape}, {s.dtype})", check_pi0)]
    for model in s.breakdown_models:
        steps.append(("breakdown", f"ttft-breakdown + token-scaling on {model}",
                      lambda rep, out, st, m=model: check_breakdown(rep, out, st, m)))
    steps.append(("serve", f"serve + perf on {s.perf_model}", check_serve_perf))
    steps.append(("oom", f"oom-boundary on {s.oom_model}", check_oom))
    steps.append(("eval", "eval + reference compare on tiny-llm", check_eval_reference))
    steps.append(("model-bench", f"model-bench on {s.perf_model}", check_model_bench))
    steps.append(("served", "served policy three ways", check_served))
    steps.append(("libero-workers", "LIBERO with env workers", check_libero_workers))
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check"), help="folder for verdicts.txt, logs, runs")
    parser.add_argument("--cpu-smoke", action="store_true", help="the cheap subset on CPU with tiny models")
    parser.add_argument("--budget-s", type=float, default=1200.0, help="stop starting checks after this long")
    parser.add_argument("--only", default="", help=f"comma-separated checks to run, of {', '.join(CHECK_GROUPS)} "
                        "(default: all)")
    parser.add_argument("--bandwidth-tb-s", type=float, default=None, help="the card's memory bandwidth in TB/s "
                        "for the pi0 traffic bound (default: from the table of known cards)")
    args = parser.parse_args(argv)
    only = {g.strip() for g in args.only.split(",") if g.strip()} or None
    if only and only - set(CHECK_GROUPS):
        print(f"gpu_check: --only {args.only}: unknown check(s) {', '.join(sorted(only - set(CHECK_GROUPS)))}; "
              f"use {', '.join(CHECK_GROUPS)}", file=sys.stderr)
        return 2
    if args.bandwidth_tb_s is not None and args.bandwidth_tb_s <= 0:
        print(f"gpu_check: --bandwidth-tb-s {args.bandwidth_tb_s}: give a positive number", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "src"))
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine, or "
              "use --cpu-smoke for the CPU subset", file=sys.stderr)
        return 2
    s = settings(args.cpu_smoke)
    s.extra["bandwidth_tb_s"] = args.bandwidth_tb_s
    args.out.mkdir(parents=True, exist_ok=True)
    rep = Reporter(args.out, args.budget_s)
    import transformers

    dev = torch.cuda.get_device_name(0) if s.device == "cuda" else "cpu"
    rep.add(verdict("setup", "machine", None, f"{dev}; torch {torch.__version__}; transformers "
                    f"{transformers.__version__}; mode {'cpu-smoke' if args.cpu_smoke else 'cuda'}"))
    for label, step in plan(s, only):
        if rep.left_s() < 30:
            rep.add(Verdict(label, "not run", "SKIP", f"time budget of {args.budget_s:.0f} s spent"))
            continue
        started = time.monotonic()
        try:
            step(rep, args.out, s)
        except Exception as exc:  # one broken check must not hide the others
            rep.add(verdict(label, "crashed", False, f"{type(exc).__name__}: {exc}"))
        rep.add(verdict(label, "wall time", None, f"{time.monotonic() - started:.0f} s"))
    print(f"gpu_check: {rep.failed} failed verdict(s); all lines in {rep.path}", flush=True)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
