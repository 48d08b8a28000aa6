"""Helpers shared by the research specs (audio-padding, multiturn-kv-reuse, oom-boundary,
ttft-batch, backend-comparison): model loading for a spec, synthetic media arrays, small statistics.

Heavy libraries (torch, numpy, matplotlib) are imported inside the functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.media.extract import SAMPLE_RATE_HZ
from lmmbench.metrics.fits import linear_fit
from lmmbench.specs.base import Spec, SpecContext

__all__ = [
    "OK",
    "ResearchSpec",
    "family_check",
    "fit_line",
    "group_median",
    "load_spec_model",
    "median",
    "new_figure",
    "ok_rows",
    "save_figure",
    "synthetic_audio",
    "synthetic_frames",
]

OK = "ok"


def load_spec_model(model: str, device: str, dtype: str) -> Any:
    """``models.load_model`` with the spec's ``--device`` / ``--dtype`` (``auto`` resolved there)."""
    from lmmbench.models import load_model

    return load_model(model, device=device, dtype=dtype)


class ResearchSpec(Spec):
    """Base of the research specs: loads the model into an ``InProcessBreakdown`` (stage hooks
    installed), records the model in run.json, clears caches between repeats, removes the hooks."""

    def load(self, ctx: SpecContext) -> Any:
        """Seed torch, load ``--model`` and install the hooks; returns the ``InProcessBreakdown``."""
        import torch

        from lmmbench.engines.inprocess_breakdown import InProcessBreakdown

        opts = ctx.options
        torch.manual_seed(opts.seed)
        threads = getattr(opts, "threads", None)
        if threads:
            torch.set_num_threads(int(threads))
        loaded = load_spec_model(opts.model, opts.device, opts.dtype)
        from lmmbench.models.attention import apply_attention, precision_settings

        ctx.environment.update(attention=apply_attention(loaded.model, getattr(opts, "attn_implementation", "auto")),
                               matmul_precision=precision_settings())
        eng = InProcessBreakdown(loaded, hooks=opts.hooks, video_fps=opts.video_fps, max_frames=opts.max_frames)
        ctx.state["engine"] = eng
        ctx.environment.update(
            model={"name": loaded.ref.name, "path": str(loaded.ref.path), "family": loaded.ref.family,
                   "class": type(loaded.model).__name__, "dtype": str(loaded.dtype), "device": str(loaded.device)},
            timer=eng.timer_kind,
            torch_threads=torch.get_num_threads(),
            processor=loaded.processor_build.record() if loaded.processor_build is not None else None,
        )
        return eng

    def clear_cache(self, ctx: SpecContext) -> None:
        eng = ctx.state.get("engine")
        if eng is not None:
            eng.clear_cache()

    def teardown(self, ctx: SpecContext) -> None:
        eng = ctx.state.pop("engine", None)
        if eng is not None:
            if getattr(eng, "hooks", None) is not None:  # run.json lists the hooks dropped during the run
                ctx.environment["dropped_hooks"] = dict(eng.hooks.dropped)
            eng.close()


def family_check(loaded: Any, spec: str, need_audio: bool = False, need_media: bool = False) -> None:
    """Fail with one line when the model cannot run ``spec`` (no audio tower, text-only model)."""
    ref = loaded.ref
    if need_audio and not ref.has_audio:
        raise UserError(f"--model {ref.name}: {spec} needs a model with an audio encoder (Qwen2.5-Omni, "
                        f"e.g. tiny-omni); this one is {ref.family}")
    if need_media and not ref.is_multimodal:
        raise UserError(f"--model {ref.name}: {spec} needs a multimodal model (tiny-omni, tiny-vl, "
                        f"Qwen2.5-Omni / -VL); this one is {ref.family}")


def synthetic_audio(duration_s: float, seed: int = 0, freq_hz: float = 440.0) -> Any:
    """A seeded 16 kHz mono float32 waveform: a tone plus a little noise."""
    import numpy as np

    n = max(1, round(duration_s * SAMPLE_RATE_HZ))
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float32) / SAMPLE_RATE_HZ
    wave = 0.3 * np.sin(2 * np.pi * freq_hz * t) + 0.02 * rng.standard_normal(n).astype(np.float32)
    return wave.astype(np.float32)


def synthetic_frames(n_frames: int, height: int, width: int, seed: int = 0) -> Any:
    """Seeded uint8 video frames ``(T, H, W, 3)``: a moving gradient with noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    frames = []
    for i in range(n_frames):
        r = np.sin(2 * np.pi * (x + 0.05 * i)) * 0.5 + 0.5 + 0 * y
        g = np.cos(2 * np.pi * (y + 0.03 * i)) * 0.5 + 0.5 + 0 * x
        b = (x + y + 0.02 * i) % 1.0
        img = np.stack([r, g, b], axis=-1) + 0.05 * rng.standard_normal((height, width, 3))
        frames.append((np.clip(img, 0.0, 1.0) * 255).astype(np.uint8))
    return np.stack(frames)


def ok_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows measured without error (``status`` ok, or no status column)."""
    return [r for r in rows if str(r.get("status", OK)) in (OK, "")]


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def median(values: Iterable[Any]) -> float:
    """Median of the numeric values (NaN when there are none)."""
    nums = [v for v in (_num(x) for x in values) if v is not None]
    return statistics.median(nums) if nums else float("nan")


def group_median(rows: Sequence[dict[str, Any]], keys: Sequence[str], field: str) -> dict[tuple[Any, ...], float]:
    """Median of ``field`` per distinct value of ``keys`` (values compared as strings)."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        groups.setdefault(tuple(str(row.get(k)) for k in keys), []).append(row.get(field))
    return {k: median(v) for k, v in groups.items()}


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """Least-squares ``y = slope * x + intercept`` with R² (NaNs when fewer than 2 distinct x; R² is 1
    when y does not vary): ``metrics.fits.linear_fit`` over the pairs where both values are numbers."""
    pts = [(float(x), float(y)) for x, y in zip(xs, ys, strict=False)
           if _num(x) is not None and _num(y) is not None]
    fit = linear_fit([x for x, _ in pts], [y for _, y in pts])
    nan = float("nan")
    if math.isnan(fit.slope):
        return {"slope": nan, "intercept": nan, "r2": nan, "n": float(len(pts))}
    r2 = 1.0 if math.isnan(fit.r2) else fit.r2
    return {"slope": fit.slope, "intercept": fit.intercept, "r2": r2, "n": float(fit.n)}


def save_figure(fig: Any, path: Path) -> Path:
    """Save a matplotlib figure (Agg) and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def new_figure(ncols: int = 1, width: float = 6.0, height: float = 4.2) -> tuple[Any, Any]:
    """A figure with ``ncols`` axes side by side, on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])
