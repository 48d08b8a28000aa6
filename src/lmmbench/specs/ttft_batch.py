"""Spec ``ttft-batch`` (N videos at once, as a TTFT-of-10-videos experiment does): TTFT and per-stage time
for N media inputs run as
one batch against the same N run one after another.

The inputs are the manifest's media rows (default: the synthetic set's videos with their audio
track), repeated in order to reach N, decoded once in ``setup``. Both modes pack with the same
processor call shape (``pack_many``: a list of conversations, left padding, one nominal ``fps``)
and time ``generate(max_new_tokens=1)`` with the stage hooks:

* ``sequential``: N packs + N generates; ``ttft_ms`` is their sum, and request i (all N arriving
  at t=0) gets its first token after the first i+1 runs: ``mean_request_ttft_ms``.
* ``batch``: one pack of N + one generate; every request gets its first token at ``ttft_ms``.

``setup`` also checks that the batch's first tokens equal the sequential ones (left padding must
not change the answer); the result is in the analysis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from lmmbench.config.limits import check_limit
from lmmbench.core.clock import now_ns, ns_to_ms
from lmmbench.specs.base import Case, RunOptions, SpecContext, register_spec
from lmmbench.specs.experiment_support import (
    ResearchSpec,
    group_median,
    new_figure,
    ok_rows,
    save_figure,
)

__all__ = ["BatchPacked", "TTFTBatchOptions", "TTFTBatchSpec", "pack_many", "ttft_batch_findings"]

STAGES = ("visual_encoder_ms", "audio_encoder_ms", "prefill_ms", "others_ms")


class TTFTBatchOptions(RunOptions):
    """Options of ``lmmbench run ttft-batch``."""

    repeats: int = Field(3, ge=1, description="Measured repeats per (mode, N).")
    num_inputs: list[int] = Field([4], description="Batch sizes N to compare (each: one batch vs N sequential).")
    modality: str = Field("video", description="Which manifest rows to use: video, image, audio, or any (rows "
                          "with media the model can take).")

    @model_validator(mode="after")
    def _check_limits(self) -> TTFTBatchOptions:
        check_limit("batch_size", max(self.num_inputs, default=0), "--num-inputs")
        check_limit("sweep_points", len(self.num_inputs), "--num-inputs (how many)")
        return self


class BatchPacked:
    """Packed inputs of a list of samples and the time packing took."""

    def __init__(self, inputs: dict[str, Any], pack_ms: float, audio_feature_ms: float) -> None:
        self.inputs = inputs
        self.pack_ms = pack_ms
        self.audio_feature_ms = audio_feature_ms



def pack_many(loaded: Any, samples: list[tuple[str, Any]], fps: float) -> BatchPacked:
    """One processor call for ``samples`` (prompt, ``ExtractedAV``): left-padded ids, every video /
    image / audio in order. ``audio_feature_ms`` is the time inside the feature extractor."""
    from lmmbench.media.pack import chat_text, media_conversation, timed_feature_extractor

    t0 = now_ns()
    proc = loaded.processor
    if proc is None:
        tok = loaded.tokenizer
        plain = [chat_text(tok, [{"role": "user", "content": p}]) for p, _ in samples]
        tok.padding_side = "left"
        enc = dict(tok(plain, return_tensors="pt", padding=True))
        return BatchPacked(enc, ns_to_ms(now_ns() - t0), 0.0)
    texts = [chat_text(proc, media_conversation(prompt, av)) for prompt, av in samples]
    videos = [av.frames for _, av in samples if av.frames is not None]
    images = [av.image for _, av in samples if av.image is not None]
    audios = [av.audio for _, av in samples if av.audio is not None]
    kwargs: dict[str, Any] = {"text": texts, "return_tensors": "pt", "padding": True}
    if videos:
        kwargs["videos"] = videos
        kwargs["videos_kwargs"] = {"fps": fps}
    if images:
        kwargs["images"] = images
    if audios:
        kwargs["audio"] = audios
    with timed_feature_extractor(proc) as timed:
        inputs = dict(proc(**kwargs))
    audio_ms = ns_to_ms(timed.elapsed_ns) if timed is not None else 0.0
    return BatchPacked(inputs, ns_to_ms(now_ns() - t0) - audio_ms, audio_ms)


def _usable(row: Any, modality: str, multimodal: bool, has_audio: bool) -> bool:
    if not multimodal:
        return row.video is None and row.image is None and row.audio is None
    if row.audio is not None and row.video is None and row.image is None and not has_audio:
        return False
    if modality == "any":
        return row.video is not None or row.image is not None or row.audio is not None
    return getattr(row, modality, None) is not None


@register_spec
class TTFTBatchSpec(ResearchSpec):
    """N media inputs as one batch vs N sequential: TTFT, per-request TTFT, per-stage time."""

    name = "ttft-batch"
    help = ("TTFT and per-stage time for a batch of N media inputs vs the same N run sequentially "
            "(N videos in one batch).")
    options_model: ClassVar[type[RunOptions]] = TTFTBatchOptions
    columns = ("mode", "n_inputs", "real_tokens", "padded_tokens", "pack_ms", "audio_feature_ms", *STAGES,
               "ttft_ms", "mean_request_ttft_ms", "last_request_ttft_ms", "mean_request_e2e_ms", "inputs_per_s")
    stage_fields: ClassVar[tuple[str, ...]] = STAGES
    total_field = "ttft_ms"
    fit_pairs = ()

    def __init__(self) -> None:
        self.token_check: dict[str, Any] = {}

    def setup(self, ctx: SpecContext) -> list[Case]:
        from lmmbench.core.errors import UserError
        from lmmbench.media.extract import extract_sample
        from lmmbench.media.manifest import load_manifest
        from lmmbench.specs.ttft_breakdown import synthetic_manifest

        opts = ctx.options
        assert isinstance(opts, TTFTBatchOptions)
        if opts.modality not in ("video", "image", "audio", "any"):
            raise UserError(f"--modality {opts.modality}: use video, image, audio or any")
        if not opts.num_inputs or min(opts.num_inputs) < 1:
            raise UserError("--num-inputs: give positive batch sizes, e.g. 4 or 2,4,8")
        eng = self.load(ctx)
        loaded = eng.loaded
        ref = loaded.ref
        manifest = synthetic_manifest(opts.seed) if opts.manifest is None else Path(opts.manifest)
        rows = [r for r in load_manifest(manifest) if _usable(r, opts.modality, ref.is_multimodal, ref.has_audio)]
        if not rows:
            raise UserError(f"{manifest}: no row with {opts.modality} media that {ref.name} can take; "
                            "use --modality any or another manifest")
        decoded = []
        for r in rows[: max(opts.num_inputs)]:
            av = extract_sample(r.video, r.image, r.audio if ref.has_audio else None, fps=opts.video_fps,
                                max_frames=opts.max_frames, use_video_audio=ref.has_audio)
            decoded.append((r.prompt, av))
        pool = [decoded[i % len(decoded)] for i in range(max(opts.num_inputs))]
        ctx.state.update(loaded=loaded, hooks=eng.hooks, pool=pool)
        ctx.environment["ttft_batch"] = {"manifest": str(manifest), "samples": [r.id for r in rows]}
        self.token_check = self._check_tokens(ctx, min(len(pool), max(opts.num_inputs)))
        ctx.environment["ttft_batch"]["first_token_check"] = self.token_check
        return [Case(id=f"{mode}_n{n}", group=mode, params={"mode": mode, "n": n},
                     extra={"mode": mode, "n_inputs": n})
                for n in opts.num_inputs for mode in ("sequential", "batch")]

    def _check_tokens(self, ctx: SpecContext, n: int) -> dict[str, Any]:
        from lmmbench.engines.breakdown import run_generate_with_breakdown

        loaded, pool = ctx.state["loaded"], ctx.state["pool"][:n]
        fps = ctx.options.video_fps
        seq = [int(run_generate_with_breakdown(loaded.model, pack_many(loaded, [s], fps).inputs,
                                               loaded.device).output_ids[0, -1]) for s in pool]
        out = run_generate_with_breakdown(loaded.model, pack_many(loaded, pool, fps).inputs, loaded.device)
        batch = [int(t) for t in out.output_ids[:, -1]]
        return {"n": n, "sequential": seq, "batch": batch, "same_first_tokens": seq == batch}

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        from lmmbench.engines.breakdown import run_generate_with_breakdown

        loaded, hooks = ctx.state["loaded"], ctx.state["hooks"]
        n, mode = int(case.params["n"]), case.params["mode"]
        samples = ctx.state["pool"][:n]
        fps = ctx.options.video_fps
        groups = [samples] if mode == "batch" else [[s] for s in samples]
        stages = dict.fromkeys(STAGES, 0.0)
        ttft = pack = feat = 0.0
        request_ttft: list[float] = []
        request_e2e: list[float] = []
        real = padded = 0
        t_start = now_ns()
        for group in groups:
            packed = pack_many(loaded, group, fps)
            res = run_generate_with_breakdown(loaded.model, packed.inputs, loaded.device, hooks)
            done_ms = ns_to_ms(now_ns() - t_start)
            f = res.fields
            ttft += f["ttft_ms"]
            pack += packed.pack_ms
            feat += packed.audio_feature_ms
            for k in STAGES:
                stages[k] += f[k]
            request_ttft += [ttft] * len(group)
            request_e2e += [done_ms] * len(group)
            mask = packed.inputs["attention_mask"]
            real += int(mask.sum())
            padded += int(mask.numel() - mask.sum())
        total_s = ns_to_ms(now_ns() - t_start) / 1000.0
        # a stage whose hook was dropped during the run is unmeasured: an empty cell, and the row degraded
        measured: dict[str, float | None] = {k: (None if k in res.unmeasured else v) for k, v in stages.items()}
        return {
            "real_tokens": real,
            "padded_tokens": padded,
            "pack_ms": pack,
            "audio_feature_ms": feat,
            **measured,
            **res.row_status(),
            "ttft_ms": ttft,
            "mean_request_ttft_ms": sum(request_ttft) / len(request_ttft),
            "last_request_ttft_ms": request_ttft[-1],
            "mean_request_e2e_ms": sum(request_e2e) / len(request_e2e),
            "inputs_per_s": n / total_s if total_s > 0 else float("nan"),
        }

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        del analysis
        out = ttft_batch_findings(rows)
        out["first_token_check"] = self.token_check
        return out

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        plot_ttft_batch(rows, path)
        return True


def _medians(rows: list[dict[str, Any]], field: str) -> dict[tuple[str, int], float]:
    return {(m, int(float(n))): v for (m, n), v in group_median(rows, ("mode", "n_inputs"), field).items()}


def ttft_batch_findings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per N: batch vs sequential TTFT (total and per request), stage split, throughput."""
    good = ok_rows(rows)
    fields = ("ttft_ms", "mean_request_ttft_ms", "mean_request_e2e_ms", "inputs_per_s", "padded_tokens",
              "pack_ms", *STAGES)
    med = {f: _medians(good, f) for f in fields}
    per_n: dict[str, dict[str, Any]] = {}
    parts: list[str] = []
    for n in sorted({n for (_, n) in med["ttft_ms"]}):
        b, s = ("batch", n), ("sequential", n)
        if b not in med["ttft_ms"] or s not in med["ttft_ms"]:
            continue
        entry: dict[str, Any] = {f"{f}_{mode}": med[f].get(key, float("nan"))
                                 for f in fields for mode, key in (("batch", b), ("sequential", s))}
        entry["ttft_speedup"] = med["ttft_ms"][s] / med["ttft_ms"][b] if med["ttft_ms"][b] else float("nan")
        seq_req, b_req = med["mean_request_ttft_ms"][s], med["mean_request_ttft_ms"][b]
        entry["mean_request_ttft_change_pct"] = 100.0 * (b_req - seq_req) / seq_req if seq_req else float("nan")
        per_n[str(n)] = entry
        parts.append(
            f"N={n}: one batch {med['ttft_ms'][b]:.1f} ms vs {med['ttft_ms'][s]:.1f} ms for N sequential "
            f"({entry['ttft_speedup']:.2f}x); mean per-request TTFT {b_req:.1f} vs {seq_req:.1f} ms "
            f"({entry['mean_request_ttft_change_pct']:+.0f} %); the batch pads {med['padded_tokens'][b]:.0f} tokens; "
            f"visual encoder {med['visual_encoder_ms'][b]:.1f} vs {med['visual_encoder_ms'][s]:.1f} ms, prefill "
            f"{med['prefill_ms'][b]:.1f} vs {med['prefill_ms'][s]:.1f} ms")
    return {"per_n": per_n, "finding": "; ".join(parts) if parts else "no N measured in both modes"}


def plot_ttft_batch(rows: list[dict[str, Any]], path: Path) -> None:
    """Stacked stage time per (N, mode), and mean per-request TTFT per (N, mode)."""
    good = ok_rows(rows)
    med = {f: _medians(good, f) for f in (*STAGES, "mean_request_ttft_ms")}
    keys = sorted(med["visual_encoder_ms"], key=lambda k: (k[1], k[0]))
    labels = [f"N={n}\n{m}" for m, n in keys]
    fig, (ax1, ax2) = new_figure(2)
    bottom = [0.0] * len(keys)
    for i, stage in enumerate(STAGES):
        vals = [max(0.0, med[stage].get(k, 0.0)) for k in keys]
        ax1.bar(labels, vals, bottom=bottom, label=stage.removesuffix("_ms"), color=f"C{i}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax1.set_ylabel("ms (median; sequential = sum of N runs)")
    ax1.set_title("TTFT by stage")
    ax1.legend(fontsize=8)
    ax2.bar(labels, [med["mean_request_ttft_ms"].get(k, 0.0) for k in keys],
            color=["C2" if m == "batch" else "C7" for m, _ in keys])
    ax2.set_ylabel("mean per-request TTFT (ms, all arrive at t=0)")
    ax2.set_title("what a request waits")
    save_figure(fig, path)
