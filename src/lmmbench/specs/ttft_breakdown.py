"""``ttft-breakdown``: the stage-level TTFT breakdown over a manifest (or the synthetic set)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.engines.inprocess_breakdown import BREAKDOWN_FIELDS, InProcessBreakdown, SampleMedia
from lmmbench.media.manifest import ManifestRow, load_manifest
from lmmbench.profiling.stages import OTHERS_PARTS, PREFILL_PARTS
from lmmbench.specs.base import Case, Spec, SpecContext, register_spec

__all__ = ["BREAKDOWN_COLUMNS", "InProcessSpec", "TTFTBreakdownSpec", "synthetic_manifest"]

log = logging.getLogger(__name__)

BREAKDOWN_COLUMNS = (
    *BREAKDOWN_FIELDS,
    *PREFILL_PARTS[1:],
    *OTHERS_PARTS,
    "prefill_outside_forward_ms",
    "prefill_study_timer_ms",
    "unattributed_pct",
    "mel_valid_frames",
    "video_frames",
    "ttft_wall_ms",
    "timer",
    "first_token_id",
    "hook_errors",
)
# the finest partition of ttft_ms (the stacked bars and the shares; the study's four stages are
# laid beside its published shares in the analysis's ``ttft_study_comparison``)
STAGES = ("visual_encoder_ms", "audio_encoder_ms", *PREFILL_PARTS, *OTHERS_PARTS)


def synthetic_manifest(seed: int) -> Path:
    """The synthetic set of ``seed`` under $LMMBENCH_HOME/media (generated on first use)."""
    from lmmbench.media.synth import SynthConfig, synth_media
    from lmmbench.models import lmmbench_home

    root = lmmbench_home() / "media" / f"synth-seed{seed}"
    manifest = root / "manifest.csv"
    if not manifest.is_file():
        synth_media(root, SynthConfig(seed=seed))
    return manifest


def check_prompts_fit(rows: list[Any], loaded: Any, manifest: Path) -> None:
    """Every row's prompt within the model's context (its text tokens alone; media add more), as eval and
    serve check theirs: a longer prompt is refused with its row before anything is measured. A prompt of more
    characters than 32 per context token is refused without tokenizing it."""
    from lmmbench.backends.scoring import resolve_max_length

    context = resolve_max_length(loaded.model.config, loaded.tokenizer)
    for row in rows:
        prompt = str(getattr(row, "prompt", "") or "")
        if len(prompt) > 32 * context:
            raise UserError(f"{manifest}: row {row.id}: a prompt of {len(prompt)} characters cannot fit the model's "
                            f"context of {context} tokens")
        n = len(loaded.tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
        if n > context:
            raise UserError(f"{manifest}: row {row.id}: its prompt has {n} tokens, more than the model's context "
                            f"of {context}; shorten it (the oom-boundary spec is the one that goes past the context)")


class InProcessSpec(Spec):
    """Shared set-up of in-process specs: load the model, install hooks, seed torch."""

    stage_fields = STAGES
    preprocess_fields = ("extract_ms", "pack_ms", "audio_feature_ms")
    unattributed_field = "others_unattributed_ms"

    compare_with_study = False  # lay the run beside the TTFT study's published numbers (analysis + report)

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        """Audio padding (mel frames produced vs the clip's own frames); the comparison with the TTFT study."""
        del analysis
        out: dict[str, Any] = {}
        if self.compare_with_study:
            from lmmbench.reports.ttft_study import study_comparison

            comparison = study_comparison(rows, self.fit_stat)
            if comparison is not None:
                out["ttft_study_comparison"] = comparison
        padding = self._audio_padding(rows)
        if padding:
            out["audio_padding"] = padding
        return out

    @staticmethod
    def _audio_padding(rows: list[dict[str, Any]]) -> dict[str, Any]:
        from lmmbench.reports.results_csv import numeric

        audio = [r for r in rows if r.get("status") == "ok" and numeric(r.get("mel_frames")) > 0]
        if not audio:
            return {}
        mel = [numeric(r.get("mel_frames")) for r in audio]
        valid = [numeric(r.get("mel_valid_frames")) for r in audio]
        feat = [numeric(r.get("audio_feature_ms")) for r in audio]
        pre = [numeric(r.get("preprocess_ms")) for r in audio]
        return {
            "rows_with_audio": len(audio),
            "mel_frames_min": min(mel), "mel_frames_max": max(mel),
            "mel_valid_frames_mean": sum(valid) / len(valid),
            "padded_share_pct": 100.0 * (1.0 - sum(valid) / sum(mel)),
            "audio_feature_ms_mean": sum(feat) / len(feat),
            "audio_feature_share_of_preprocess_pct": 100.0 * sum(feat) / sum(pre) if sum(pre) > 0 else None,
            "note": "the processor's default padding is kept (what users get); mel_frames is what it produced",
        }

    def engine(self, ctx: SpecContext) -> InProcessBreakdown:
        eng = ctx.state.get("engine")
        if eng is None:
            raise RuntimeError("the engine is not loaded (setup was not called)")
        assert isinstance(eng, InProcessBreakdown)
        return eng

    def load(self, ctx: SpecContext) -> InProcessBreakdown:
        import torch

        from lmmbench.models import load_model

        opts = ctx.options
        torch.manual_seed(opts.seed)
        if opts.threads:
            ctx.state["threads_before"] = torch.get_num_threads()
            torch.set_num_threads(opts.threads)
        loaded = load_model(opts.model, device=opts.device, dtype=opts.dtype)
        from lmmbench.models.attention import apply_attention, precision_settings

        ctx.environment.update(attention=apply_attention(loaded.model, opts.attn_implementation),
                               matmul_precision=precision_settings())
        eng = InProcessBreakdown(loaded, hooks=opts.hooks, video_fps=opts.video_fps, max_frames=opts.max_frames)
        ctx.state["engine"] = eng
        mods = eng.hooks.modules if eng.hooks is not None else None
        ctx.environment.update(
            model={"name": loaded.ref.name, "path": str(loaded.ref.path), "family": loaded.ref.family,
                   "class": type(loaded.model).__name__, "dtype": str(loaded.dtype), "device": str(loaded.device)},
            timer=eng.timer_kind,
            torch_threads=torch.get_num_threads(),
            hooks={"enabled": opts.hooks, "module_paths": mods.paths if mods is not None else {}},
            processor=loaded.processor_build.record() if loaded.processor_build is not None else None,
            dropped_hooks={},
        )
        return eng

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        media = case.params["media"]
        assert isinstance(media, SampleMedia)
        return self.engine(ctx).measure(media)

    def clear_cache(self, ctx: SpecContext) -> None:
        if "engine" in ctx.state:
            self.engine(ctx).clear_cache()

    def teardown(self, ctx: SpecContext) -> None:
        eng = ctx.state.pop("engine", None)
        if isinstance(eng, InProcessBreakdown):
            if eng.hooks is not None:  # run.json lists the hooks dropped during the run
                ctx.environment["dropped_hooks"] = dict(eng.hooks.dropped)
            eng.close()
        before = ctx.state.pop("threads_before", None)
        if before:
            import torch

            torch.set_num_threads(before)


def _case(row: ManifestRow, has_vision: bool, has_audio: bool, synthetic: bool) -> Case:
    """A case of a manifest row; on the synthetic set, media the model cannot take are dropped."""
    video, image, audio = row.video, row.image, row.audio
    if synthetic:
        video = video if has_vision else None
        image = image if has_vision else None
        audio = audio if has_audio else None
    media = SampleMedia(prompt=row.prompt, video=video, image=image, audio=audio, video_audio=has_audio)
    parts = [n for n, p in (("video", video), ("image", image), ("audio", audio)) if p is not None]
    if video is not None and has_audio and audio is None:
        parts.append("video-audio-track")
    extra = {"modalities": "+".join(parts) or "text", **row.extra}
    return Case(id=row.id, group=str(row.extra.get("group") or extra["modalities"]), params={"media": media},
                extra=extra)


@register_spec
class TTFTBreakdownSpec(InProcessSpec):
    """Stage-level TTFT breakdown (preprocess / visual / audio / prefill / others) per sample."""

    name = "ttft-breakdown"
    help = "Stage-level TTFT breakdown per sample of a manifest (default: the synthetic set)."
    columns = BREAKDOWN_COLUMNS
    compare_with_study = True
    fit_pairs = (
        ("visual_encoder_ms", "visual_tokens"),
        ("audio_encoder_ms", "audio_tokens"),
        ("llm_prefill_ms", "total_tokens"),
        ("prefill_ms", "total_tokens"),
        ("ttft_ms", "total_tokens"),
    )

    def setup(self, ctx: SpecContext) -> list[Case]:
        opts = ctx.options
        synthetic = opts.manifest is None
        manifest = synthetic_manifest(opts.seed) if synthetic else Path(opts.manifest or "")
        rows = load_manifest(manifest)
        if opts.limit:
            rows = rows[: opts.limit]
        ctx.environment["manifest"] = {"path": str(manifest), "synthetic": synthetic, "rows": len(rows)}
        eng = self.load(ctx)
        ref = eng.loaded.ref
        if not synthetic and eng.loaded.processor is None and any(r.modalities != "text" for r in rows):
            log.warning("%s is a text model: rows with media will fail", ref.name)
        check_prompts_fit(rows, eng.loaded, manifest)
        return [_case(r, ref.is_multimodal, ref.has_audio, synthetic) for r in rows]
