"""Spec ``oom-boundary``: the largest input (seconds of video, total tokens) whose TTFT pass fits in
memory, found by doubling then bisection on the video length.

Each probe builds a synthetic clip of ``s`` seconds (frames at ``--video-fps``, ``--frame-size`` pixels,
with an audio track of the same length on audio models), packs it with the model's processor and
runs ``generate(max_new_tokens=1)`` under a peak-memory probe (``profiling.peak_memory``):

* CUDA: the probe fits unless ``torch.cuda.OutOfMemoryError`` is raised (caught, cache emptied, the
  search goes on) or, with ``--memory-budget-gb``, the allocator's peak exceeds the budget (to act
  as a smaller card). ``used_mb`` = peak allocated memory: weights + inputs + activations.
* CPU: ``used_mb`` = weights + resident inputs + the peak resident-set growth of the generate call
  (``VmHWM`` reset per probe); the probe fits when ``used_mb <= --memory-budget-gb``. A probe whose
  predicted use (quadratic in length from the largest fitting probe) exceeds 80 % of the machine's
  available memory is not run and counts as not fitting.

One measured row per search (``--repeats`` searches); every probe is appended to
``oom-boundary_probes.csv`` as it is measured. Each row records the attention implementation, the
frame size, the fps and whether the talker is loaded, and the finding compares itself with the boundary
the Qwen2.5-Omni TTFT study published (``published_comparison``). That study's setting, as far as FIELD-NOTES
reconstructs it:
``--model shape:qwen2.5-omni-7b --device cuda --memory-budget-gb 32 --attn-implementation eager
--frame-size 448 --video-fps 2``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from lmmbench.specs.base import Case, RunOptions, SpecContext, register_spec
from lmmbench.specs.experiment_support import (
    ResearchSpec,
    family_check,
    fit_line,
    median,
    new_figure,
    ok_rows,
    save_figure,
    synthetic_audio,
    synthetic_frames,
)

__all__ = ["OOMBoundaryOptions", "OOMBoundarySpec", "Probe", "SearchResult", "bisect_boundary", "oom_findings"]

DEFAULT_CPU_BUDGET_GB = 0.15
PROBE_COLUMNS = ("search", "seconds", "frames", "visual_tokens", "audio_tokens", "total_tokens", "inputs_mb",
                 "activation_mb", "used_mb", "budget_mb", "fits", "reason", "ttft_ms", "method")


class OOMBoundaryOptions(RunOptions):
    """Options of ``lmmbench run oom-boundary``."""

    model: str = Field("tiny-omni", description="A video model: tiny-omni, tiny-vl or a Qwen2.5-Omni / -VL dir.")
    repeats: int = Field(1, ge=1, description="Number of searches (memory is nearly deterministic).")
    warmup: int = Field(0, ge=0, description="Unrecorded searches before the measured ones (a small warm-up "
                        "probe always runs first).")
    memory_budget_gb: float | None = Field(None, gt=0, description=f"Memory budget in GB. CPU: required "
                                           f"(default {DEFAULT_CPU_BUDGET_GB}); CUDA: optional, a smaller card "
                                           "than the real one (default: until out-of-memory).")
    frame_size: int = Field(224, ge=28, description="Height and width of the synthetic video frames (pixels).")
    with_audio: bool = Field(True, description="Add an audio track as long as the clip (audio models).")
    start_s: float = Field(4.0, gt=0, description="First probe length (s); doubled until a probe does not fit.")
    max_s: float = Field(600.0, gt=0, description="Longest clip tried (s).")
    resolution_s: float = Field(4.0, gt=0, description="Bisection stops when fit and no-fit are this close (s).")
    prompt: str = Field("Describe this clip.", description="The text after the media.")


@dataclass
class Probe:
    """One tried input length and what it used."""

    seconds: float
    fits: bool
    used_mb: float = float("nan")
    total_tokens: int = 0
    visual_tokens: int = 0
    audio_tokens: int = 0
    frames: int = 0
    inputs_mb: float = float("nan")
    activation_mb: float = float("nan")
    ttft_ms: float = float("nan")
    reason: str = ""


@dataclass
class SearchResult:
    """All probes of one search, the longest length that fit and the shortest that did not."""

    probes: list[Probe]
    boundary: Probe | None
    first_fail: Probe | None


def bisect_boundary(probe: Callable[[float], Probe], start_s: float, max_s: float, resolution_s: float) -> SearchResult:
    """Double from ``start_s`` until a probe does not fit (or ``max_s``), then bisect to ``resolution_s``.

    Lengths are multiples of ``resolution_s``. Assumes memory grows with length (the usual case); a
    non-monotonic model still gets a fitting length and a failing one within ``resolution_s``.
    """
    res = resolution_s

    def snap(s: float) -> float:
        return max(res, round(s / res) * res)

    probes: list[Probe] = []
    lo: Probe | None = None
    hi: Probe | None = None
    s = snap(start_s)
    limit = snap(max_s)
    while True:
        p = probe(s)
        probes.append(p)
        if not p.fits:
            hi = p
            break
        lo = p
        if s >= limit:
            break
        s = min(limit, snap(s * 2))
    if hi is not None:
        lo_s = lo.seconds if lo is not None else 0.0
        while hi.seconds - lo_s > res:
            mid = snap((lo_s + hi.seconds) / 2)
            if mid <= lo_s or mid >= hi.seconds:
                break
            p = probe(mid)
            probes.append(p)
            if p.fits:
                lo, lo_s = p, p.seconds
            else:
                hi = p
    return SearchResult(probes, lo, hi)


class _ProbeRunner:
    """Builds a clip of a given length, runs the TTFT pass under the memory probe, applies the budget."""

    def __init__(self, loaded: Any, opts: OOMBoundaryOptions) -> None:
        from lmmbench.profiling.peak_memory import peak_memory_probe

        self.loaded = loaded
        self.opts = opts
        self.on_cuda = getattr(loaded.device, "type", "") == "cuda"
        self.memory = peak_memory_probe(loaded.device)
        budget_gb = opts.memory_budget_gb
        if budget_gb is None and not self.on_cuda:
            budget_gb = DEFAULT_CPU_BUDGET_GB
        self.budget_mb = budget_gb * 1024.0 if budget_gb is not None else float("inf")
        self.weights_mb = sum(p.numel() * p.element_size() for p in loaded.model.parameters()) / 2**20
        self.largest_fit: Probe | None = None

    def _inputs(self, seconds: float) -> dict[str, Any]:
        from lmmbench.media.pack import chat_text

        opts, proc = self.opts, self.loaded.processor
        n_frames = max(2, int(seconds * opts.video_fps) // 2 * 2)
        content: list[dict[str, Any]] = [{"type": "video"}]
        kwargs: dict[str, Any] = {"videos": [synthetic_frames(n_frames, opts.frame_size, opts.frame_size, opts.seed)],
                                  "videos_kwargs": {"fps": opts.video_fps}}
        if opts.with_audio and self.loaded.ref.has_audio:
            content.append({"type": "audio"})
            kwargs["audio"] = [synthetic_audio(seconds, seed=opts.seed)]
        content.append({"type": "text", "text": opts.prompt})
        text = chat_text(proc, [{"role": "user", "content": content}])
        return dict(proc(text=[text], return_tensors="pt", **kwargs))

    def _predicted_mb(self, seconds: float) -> float:
        big = self.largest_fit
        if big is None or not math.isfinite(big.used_mb) or big.seconds <= 0:
            return 0.0
        return big.used_mb * (seconds / big.seconds) ** 2

    def __call__(self, seconds: float) -> Probe:
        from lmmbench.engines.breakdown import run_generate_with_breakdown
        from lmmbench.media.pack import token_stats
        from lmmbench.profiling.peak_memory import available_mb, release_cpu_memory, resident_mb

        if not self.on_cuda:
            predicted = self._predicted_mb(seconds)
            if predicted > 0.8 * available_mb():
                return Probe(seconds, False, reason=f"skipped: predicted {predicted:.0f} MB > 80 % of the "
                             f"{available_mb():.0f} MB available")
        release_cpu_memory()
        base = resident_mb()
        inputs = self._inputs(seconds)
        release_cpu_memory()
        inputs_mb = max(0.0, resident_mb() - base)
        stats = token_stats(inputs["input_ids"], self.loaded.tokenizer)
        n_frames = int(self.opts.video_fps * seconds) // 2 * 2

        def ttft_pass() -> float:
            return run_generate_with_breakdown(self.loaded.model, inputs, self.loaded.device).ttft_wall_ms

        m = self.memory.measure(ttft_pass)
        used = m.peak_mb if self.on_cuda else self.weights_mb + inputs_mb + m.growth_mb
        fits = not m.oom and used <= self.budget_mb
        reason = m.reason if m.oom else ("" if fits else f"over budget: {used:.0f} MB > {self.budget_mb:.0f} MB")
        p = Probe(seconds, fits, used, stats.total_tokens, stats.visual_tokens, stats.audio_tokens, max(2, n_frames),
                  inputs_mb, m.growth_mb, float(m.result) if m.result is not None else float("nan"), reason)
        if fits and (self.largest_fit is None or seconds > self.largest_fit.seconds):
            self.largest_fit = p
        return p


def _append_probes(path: Path, search: int, probes: list[Probe], budget_mb: float, method: str) -> None:
    new = not path.is_file()
    with path.open("a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(PROBE_COLUMNS))
        if new:
            writer.writeheader()
        for p in probes:
            row = {k: v for k, v in asdict(p).items() if k in PROBE_COLUMNS}
            writer.writerow({**row, "search": search, "budget_mb": budget_mb, "method": method})
        fh.flush()


@register_spec
class OOMBoundarySpec(ResearchSpec):
    """Largest video input (seconds, tokens) that fits: OOM catching on CUDA, a budget on CPU."""

    name = "oom-boundary"
    help = ("Largest video input (seconds, total tokens) that fits in memory, by doubling + bisection: CUDA "
            "out-of-memory caught and recovered, or --memory-budget-gb on CPU; peak memory per token.")
    options_model: ClassVar[type[RunOptions]] = OOMBoundaryOptions
    columns = ("boundary_s", "boundary_tokens", "boundary_used_mb", "first_fail_s", "first_fail_tokens",
               "first_fail_reason", "budget_mb", "weights_mb", "n_probes", "mb_per_token", "memory_method",
               "attn_implementation", "frame_size", "video_fps", "talker_loaded")
    stage_fields: ClassVar[tuple[str, ...]] = ()
    total_field = "boundary_used_mb"
    fit_pairs = ()

    def __init__(self) -> None:
        self.probes_path: Path | None = None
        self.searches = 0

    def setup(self, ctx: SpecContext) -> list[Case]:
        opts = ctx.options
        assert isinstance(opts, OOMBoundaryOptions)
        eng = self.load(ctx)
        family_check(eng.loaded, self.name, need_media=True)
        runner = _ProbeRunner(eng.loaded, opts)
        runner(1.0)  # warm-up probe: first-call allocations are not charged to the first real probe
        runner.largest_fit = None
        self.probes_path = ctx.spec_dir / f"{self.name}_probes.csv"
        if not opts.resume and self.probes_path.exists():
            self.probes_path.unlink()
        ctx.state["probe_runner"] = runner
        ctx.environment["oom_boundary"] = {"budget_mb": runner.budget_mb, "weights_mb": runner.weights_mb,
                                           "memory_method": runner.memory.method}
        return [Case(id="search", group="bisection")]

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        del case
        opts = ctx.options
        assert isinstance(opts, OOMBoundaryOptions)
        runner: _ProbeRunner = ctx.state["probe_runner"]
        runner.largest_fit = None
        result = bisect_boundary(runner, opts.start_s, opts.max_s, opts.resolution_s)
        if self.probes_path is not None and not ctx.warmup:  # the probes of warm-up searches are not kept
            self.searches += 1
            _append_probes(self.probes_path, self.searches, result.probes, runner.budget_mb, runner.memory.method)
        ok = [p for p in result.probes if p.fits and math.isfinite(p.used_mb)]
        fit = fit_line([p.total_tokens for p in ok], [p.used_mb for p in ok])
        b, f = result.boundary, result.first_fail
        nan = float("nan")
        return {
            "boundary_s": b.seconds if b else 0.0,
            "boundary_tokens": b.total_tokens if b else 0,
            "boundary_used_mb": b.used_mb if b else nan,
            "first_fail_s": f.seconds if f else nan,
            "first_fail_tokens": f.total_tokens if f else nan,
            "first_fail_reason": f.reason if f else "none: max_s fits",
            "budget_mb": runner.budget_mb,
            "weights_mb": runner.weights_mb,
            "n_probes": len(result.probes),
            "mb_per_token": fit["slope"],
            "memory_method": runner.memory.method,
            **_setting(runner.loaded.model, opts),
        }

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        del analysis
        return oom_findings(rows, _read_probes(self.probes_path))

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        plot_oom(rows, _read_probes(self.probes_path), path)
        return True


def _setting(model: Any, opts: OOMBoundaryOptions) -> dict[str, Any]:
    """What decides the boundary besides the budget: attention (of the vision tower when there is one),
    frame size, fps, and whether the talker's weights share the memory."""
    from lmmbench.models.attention import attention_record

    in_use = attention_record(model)["in_use"]
    return {"attn_implementation": in_use.get("vision", in_use["model"]), "frame_size": opts.frame_size,
            "video_fps": opts.video_fps, "talker_loaded": getattr(model, "talker", None) is not None}


def _read_probes(path: Path | None) -> list[dict[str, str]]:
    if path is None or not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _fits(row: dict[str, Any]) -> bool:
    return str(row.get("fits")) in ("True", "true", "1")


def oom_findings(rows: list[dict[str, Any]], probes: list[dict[str, Any]]) -> dict[str, Any]:
    """The boundary (median over searches) and the memory-per-token fit over every fitting probe."""
    good = ok_rows(rows)
    fitting = [p for p in probes if _fits(p)]
    fit = fit_line([float(p["total_tokens"]) for p in fitting], [float(p["used_mb"]) for p in fitting])
    boundary_s = median(r.get("boundary_s") for r in good)
    boundary_tokens = median(r.get("boundary_tokens") for r in good)
    fail_s = median(r.get("first_fail_s") for r in good)
    budget = median(r.get("budget_mb") for r in good)
    used = median(r.get("boundary_used_mb") for r in good)
    reasons = sorted({str(r.get("first_fail_reason")).split(":")[0] for r in good})  # kinds, not sizes
    out: dict[str, Any] = {
        "boundary_s": boundary_s,
        "boundary_tokens": boundary_tokens,
        "boundary_used_mb": used,
        "first_fail_s": fail_s,
        "first_fail_reasons": reasons,
        "budget_mb": budget,
        "mb_per_token": fit["slope"],
        "fixed_mb": fit["intercept"],
        "r2_used_vs_tokens": fit["r2"],
        "tokens_per_second": boundary_tokens / boundary_s if boundary_s else float("nan"),
        "n_probes": len(probes),
        "published_reference": "Qwen2.5-Omni TTFT study: 25-30k tokens, about 34 s of video, on a 32 GB GPU "
                               "(Qwen2.5-Omni-7B)",
        "published_comparison": published_comparison(good, boundary_s, boundary_tokens, fit["slope"]),
    }
    if math.isfinite(budget) and math.isfinite(fit["slope"]) and fit["slope"] > 0:
        out["predicted_tokens_at_budget"] = (budget - fit["intercept"]) / fit["slope"]
    budget_txt = f"a {budget / 1024:.2f} GB budget" if math.isfinite(budget) else "device memory"
    fail_txt = (f"{fail_s:g} s does not fit ({'; '.join(reasons)})" if math.isfinite(fail_s)
                else "every length tried fits: raise --max-s to find the boundary")
    out["finding"] = (
        f"largest input that fits {budget_txt}: {boundary_s:g} s of video = {boundary_tokens:.0f} tokens "
        f"({used:.0f} MB used); {fail_txt}; memory grows "
        f"{1024 * fit['slope']:.1f} KB per token (R² {fit['r2']:.2f}) over {len(fitting)} fitting probes")
    return out


def _number_or_none(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


PUBLISHED_BOUNDARY = {"tokens_low": 25_000, "tokens_high": 30_000, "video_s": 34.0, "gpu_gb": 32.0}
# FIELD-NOTES, measured on one H100 (2026-11-22), Qwen2.5-Omni-7B-shaped thinker, bf16, 448x448, 2 fps, audio track,
# 32 GB budget: not measured in this lmmbench session.
FIELD_NOTES_H100 = {"sdpa": {"fit_s": 240.0, "fit_tokens": 67_000, "kb_per_token": 226.0},
                    "eager": {"fit_s": 24.0, "fail_s": 28.0}}
OMNI_7B_TALKER_PARAMS = 1.307e9 + 0.449e9  # talker + token2wav, counted from the published configs (tests/models)


def published_comparison(rows: list[dict[str, Any]], boundary_s: float, boundary_tokens: float,
                    mb_per_token: float) -> dict[str, Any]:
    """This run against the published boundary in numbers, and the estimate of what explains its lower value."""
    first = rows[0] if rows else {}
    mid_published = (PUBLISHED_BOUNDARY["tokens_low"] + PUBLISHED_BOUNDARY["tokens_high"]) / 2
    talker_gb = OMNI_7B_TALKER_PARAMS * 2 / 1e9
    talker_tokens = talker_gb * 1e6 / FIELD_NOTES_H100["sdpa"]["kb_per_token"]
    return {
        "setting": {"attn_implementation": first.get("attn_implementation"),
                    "frame_size": _number_or_none(first.get("frame_size")),
                    "video_fps": _number_or_none(first.get("video_fps")),
                    "talker_loaded": str(first.get("talker_loaded")) in ("True", "true", "1") if first else None},
        "this_run": {"boundary_s": boundary_s, "boundary_tokens": boundary_tokens,
                     "kb_per_token": 1024 * mb_per_token if math.isfinite(mb_per_token) else None,
                     "tokens_vs_published": (boundary_tokens / mid_published
                                             if math.isfinite(boundary_tokens) else None),
                     "seconds_vs_published": (boundary_s / PUBLISHED_BOUNDARY["video_s"]
                                              if math.isfinite(boundary_s) else None)},
        "published_boundary": PUBLISHED_BOUNDARY,
        "field_notes_h100": FIELD_NOTES_H100,
        "estimate": (
            f"The published {PUBLISHED_BOUNDARY['video_s']:g} s is the eager-attention regime: on an H100 with a "
            "32 GB budget "
            f"a 7B-shaped thinker at 448x448, 2 fps fitted {FIELD_NOTES_H100['eager']['fit_s']:g} s with eager "
            f"(28 s did not) but {FIELD_NOTES_H100['sdpa']['fit_s']:g} s (67 k tokens) with sdpa. The talker's "
            f"weights (talker + token2wav, {OMNI_7B_TALKER_PARAMS / 1e9:.2f} B parameters = {talker_gb:.1f} GB in "
            f"bf16) would take about {talker_tokens / 1000:.0f} k tokens off the sdpa boundary at 226 KB/token: "
            "not enough on their own to bring 67 k down to 25-30 k."),
        "status": "unverified in this session: the eager-vs-sdpa numbers were measured on an H100 per FIELD-NOTES "
                  "(2026-11-22), not by this run; the talker figure is an estimate from parameter counts",
    }


def plot_oom(rows: list[dict[str, Any]], probes: list[dict[str, Any]], path: Path) -> None:
    """Memory used against tokens and against seconds, fitting vs not, with the budget line."""
    del rows
    fig, (ax1, ax2) = new_figure(2)
    for ax, x_field, label in ((ax1, "total_tokens", "total tokens"), (ax2, "seconds", "video seconds")):
        for fits, color, name in ((True, "C2", "fits"), (False, "C3", "does not fit")):
            pts = [(float(p[x_field]), float(p["used_mb"])) for p in probes
                   if _fits(p) == fits and p.get("used_mb") not in ("", "nan", None)
                   and math.isfinite(float(p["used_mb"]))]
            if pts:
                ax.scatter([x for x, _ in pts], [y for _, y in pts], color=color, label=name, s=22)
        budgets = {float(p["budget_mb"]) for p in probes if p.get("budget_mb") not in ("", None)}
        for b in budgets:
            if math.isfinite(b):
                ax.axhline(b, color="k", linestyle="--", linewidth=1, label=f"budget {b:.0f} MB")
        ax.set_xlabel(label)
        ax.set_ylabel("memory used (MB)")
        ax.grid(alpha=0.3)
        ax.legend()
    ax1.set_title("memory vs tokens")
    ax2.set_title("memory vs clip length")
    save_figure(fig, path)
