"""`lmmbench media synth`: write the reproducible synthetic media set and its manifest."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import BaseModel, ConfigDict, Field

from lmmbench.config.cli_options import command_from_model


class SynthOptions(BaseModel):
    """Write mp4 videos with an audio track, images, wav files and manifest.csv."""

    model_config = ConfigDict(extra="forbid")

    out_dir: Path = Field(Path("media"), description="Directory to write the set into.")
    seed: int = Field(0, description="Seed of the content.")
    video_seconds: list[float] = Field([1.0, 2.0, 4.0], description="Video durations in seconds.")
    image_sizes: list[int] = Field([224], description="Square image sides in pixels.")
    audio_seconds: list[float] = Field([6.0, 12.0], description="wav durations in seconds.")


def _synth(opts: SynthOptions) -> None:
    from lmmbench.config.input_files import prepare_out_dir
    from lmmbench.config.limits import check_limit
    from lmmbench.core.errors import UserError
    from lmmbench.media.synth import SynthConfig, synth_media

    if any(not s > 0 for s in [*opts.video_seconds, *opts.audio_seconds]) or any(s < 28 for s in opts.image_sizes):
        raise UserError("durations must be > 0 (not NaN) and image sides >= 28 pixels")
    check_limit("media_seconds", max([*opts.video_seconds, *opts.audio_seconds], default=0), "a duration")
    check_limit("image_side", max(opts.image_sizes, default=0), "--image-sizes")
    check_limit("sweep_points", len(opts.video_seconds) + len(opts.audio_seconds) + len(opts.image_sizes),
                "media files")
    prepare_out_dir(opts.out_dir)
    cfg = SynthConfig(
        video_durations_s=tuple(opts.video_seconds),
        image_sizes=tuple((s, s) for s in opts.image_sizes),
        audio_durations_s=tuple(opts.audio_seconds),
        seed=opts.seed,
    )
    manifest = synth_media(opts.out_dir, cfg)
    typer.echo(f"wrote {manifest}")


def register(app: typer.Typer) -> None:
    """Add the ``media`` command group."""
    media_app = typer.Typer(help="Media sets for the in-process specs.", no_args_is_help=True)
    command_from_model(media_app, "synth", SynthOptions, _synth)
    app.add_typer(media_app, name="media")
