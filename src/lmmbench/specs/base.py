"""The spec API: a named experiment = options model + cases + ``run_once`` + what to fit and plot.

A spec is a class registered in ``SPECS`` (third-party packages add theirs through the
``lmmbench.specs`` entry-point group). ``lmmbench run <name>`` derives its options from
``options_model``, calls ``setup`` for the cases, runs every case ``warmup`` + ``repeats``
times through ``UnifiedRunner`` (each measured row appended to the results CSV at once), then
writes the summary, analysis, plot and run.json from the declared ``stage_fields`` /
``fit_pairs``. See docs/ttft-breakdown.md, "Adding a spec".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lmmbench.config.common import (
    Dtype,
    baseline_field,
    device_field,
    dtype_field,
    mlflow_field,
    out_dir_field,
    revision_field,
    threads_field,
    wandb_field,
    with_revision,
)
from lmmbench.core.registry import Registry

__all__ = ["SPECS", "Case", "RunOptions", "Spec", "SpecContext", "register_spec"]


class RunOptions(BaseModel):
    """Options shared by every spec."""

    model_config = ConfigDict(extra="forbid")
    cli_panels: ClassVar[dict[str, tuple[str, ...]]] = {
        "Measurement": ("manifest", "repeats", "warmup", "seed", "limit", "video_fps", "max_frames", "interleave",
                        "clear_cache"),
    }  # fmt: skip

    model: str = Field("tiny-omni", description="Built-in model name (tiny-omni, tiny-vl, tiny-llm), a hub id "
                       "(ORG/NAME) or a local Hugging Face model directory.")
    revision: str | None = revision_field()

    @model_validator(mode="after")
    def _hub_revision(self) -> Self:
        self.model = with_revision(self.model, self.revision)  # type: ignore[assignment]
        return self

    manifest: Path | None = Field(None, description="Manifest CSV (id, video, image, audio, prompt, extras...); "
                                  "default: the synthetic set, generated on first use.")
    out_dir: Path = out_dir_field("Results go to <out-dir>/<spec>/.")
    repeats: int = Field(5, ge=1, description="Measured repeats per sample.")
    warmup: int = Field(1, ge=0, description="Unrecorded warm-up runs per sample before the repeats.")
    device: str = device_field()
    dtype: Dtype = dtype_field()
    resume: bool = Field(False, description="Keep the existing results file and skip rows already measured.")
    overwrite: bool = Field(False, description="Replace the run already in <out-dir>/<spec>/ (default: refuse).")
    seed: int = Field(0, description="Seed of the synthetic set and of torch.")
    limit: int | None = Field(None, ge=1, description="Measure only the first N samples.")
    video_fps: float = Field(2.0, gt=0, description="Frames sampled per second of video.")
    max_frames: int = Field(64, ge=2, description="At most this many video frames per sample.")
    threads: int | None = threads_field()
    hooks: bool = Field(True, description="Stage hooks on (off: TTFT only, for overhead checks).")
    interleave: bool = Field(False, description="Measure repeat 0 of every sample, then repeat 1, ... (spreads "
                             "bursts of load on a shared machine over samples).")
    clear_cache: bool = Field(True, description="gc + CUDA cache clearing between repeats.")
    progress: bool = Field(True, description="Show a progress bar.")
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = Field(
        "auto", description="Attention of every tower (auto: what transformers picks, sdpa in 5.x); recorded in "
        "run.json with the matmul precision settings.")
    target_ci_pct: float | None = Field(None, gt=0, description="Keep repeating a sample until the 95 % CI of its "
                                        "TTFT median is within this % of the median (order-statistic CI: needs >= 6 "
                                        "repeats), up to --max-repeats.")
    max_repeats: int = Field(30, ge=1, description="Most repeats per sample with --target-ci-pct.")
    profile: bool = Field(False, description="Also write a torch profiler trace (Chrome/Perfetto JSON) of one extra, "
                          "unrecorded run of --profile-sample after its repeat --profile-repeat.")
    profile_sample: str | None = Field(None, description="Sample id to profile (default: the first sample).")
    profile_repeat: int = Field(0, ge=0, description="Profile after this measured repeat of the sample.")
    baseline: str | None = baseline_field()
    mlflow: str | None = mlflow_field()
    wandb: str | None = wandb_field()


@dataclass
class Case:
    """One sample of a spec: an id, a group label, spec-owned params, extras carried into results."""

    id: str
    group: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SpecContext:
    """What a spec sees while it runs."""

    options: RunOptions
    spec_dir: Path
    state: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)  # merged into run.json
    warmup: bool = False  # True while the runner makes an unrecorded warm-up call of run_once


class Spec:
    """Base class of specs; override ``setup`` and ``run_once`` at least."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    options_model: ClassVar[type[RunOptions]] = RunOptions
    columns: ClassVar[tuple[str, ...]] = ()  # measured fields, in CSV order
    stage_fields: ClassVar[tuple[str, ...]] = ()  # stacked per-sample bars, and shares of total_field
    preprocess_fields: ClassVar[tuple[str, ...]] = ()  # a second stacked-bar panel (CPU work before TTFT)
    total_field: ClassVar[str] = "ttft_ms"
    fit_pairs: ClassVar[tuple[tuple[str, str], ...]] = ()  # (y, x): linear fit y = slope * x + intercept
    unattributed_field: ClassVar[str | None] = None
    fit_stat: ClassVar[str] = "median"  # per-sample point of the fits: median | min over repeats
    not_applicable: ClassVar[frozenset[str]] = frozenset()  # RunOptions fields the CLI does not offer

    def setup(self, ctx: SpecContext) -> list[Case]:
        """Load what the spec needs (into ``ctx.state``) and return its cases."""
        raise NotImplementedError

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        """Measure ``case`` once; return its fields. An exception fails this row only."""
        raise NotImplementedError

    def clear_cache(self, ctx: SpecContext) -> None:
        """Called between repeats (when --clear-cache)."""

    def teardown(self, ctx: SpecContext) -> None:
        """Called once after the last case, even after an error."""

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        """Spec-specific additions to the analysis file."""
        del rows, analysis
        return {}

    def headline(self, analysis: dict[str, Any]) -> dict[str, float | None]:
        """Headline metrics of the run log besides the medians of the ``*_ms`` columns (default none)."""
        del analysis
        return {}

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        """Draw a spec-specific figure at ``path``; return False to use the generic breakdown plot."""
        del rows, path
        return False


SPECS: Registry[type[Spec]] = Registry("specs")


def register_spec(cls: type[Spec]) -> type[Spec]:
    """Class decorator: register a spec under its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    SPECS.add(cls.name, cls)
    return cls
