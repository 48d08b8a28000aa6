"""Configuration of ``lmmbench envs list|prune|build-image``: pydantic models the CLI is derived from."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["EnvsBuildImageConfig", "EnvsListConfig", "EnvsPruneConfig", "duration_s"]

_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def duration_s(text: str) -> float:
    """Seconds of a duration like ``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` (a bare number is seconds)."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration like 30d, 12h, 90m, 45s or 2w")
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"]


class EnvsListConfig(BaseModel):
    """List the venvs kept under $LMMBENCH_HOME/venvs (plan rows' requirements), most recently used first."""

    model_config = ConfigDict(extra="forbid")
    CLI_ALIASES: ClassVar[dict[str, tuple[str, ...]]] = {"json_output": ("--json",)}

    json_output: bool = Field(False, description="Print the venvs as JSON (one object per venv).")


class EnvsPruneConfig(BaseModel):
    """Remove the least recently used venvs beyond the bounds venvs_kept / venvs_bytes (docs/reliability.md; raise
    or lower them with --limit), or beyond --keep / older than --older-than. A venv a running row uses is kept."""

    model_config = ConfigDict(extra="forbid")
    cli_panels: ClassVar[dict[str, tuple[str, ...]]] = {"What to remove": ("keep", "older_than", "dry_run")}

    keep: int | None = Field(None, ge=0, description="Keep at most this many venvs, the most recently used "
                             "(default: the limit venvs_kept).")  # fmt: skip
    older_than: str | None = Field(None, description="Also remove every venv last used longer ago than this, "
                                   "e.g. 30d, 12h, 90m, 45s.")  # fmt: skip
    dry_run: bool = Field(False, description="Print what would be removed; remove nothing.")

    @field_validator("older_than")
    @classmethod
    def _a_duration(cls, value: str | None) -> str | None:
        if value is not None:
            duration_s(value)
        return value

    @property
    def older_than_s(self) -> float | None:
        """``older_than`` in seconds (None: not given)."""
        return None if self.older_than is None else duration_s(self.older_than)


class EnvsBuildImageConfig(BaseModel):
    """Build the self-contained container image: a Python and lmmbench from a wheel of this checkout with the
    extras given, nothing mounted from the host (docs/plans.md, "Images that carry lmmbench"). Cached by content:
    a second call with the same wheel, extras and Python prints the same image and builds nothing. The engine is
    $LMMBENCH_CONTAINER_ENGINE (default docker)."""

    model_config = ConfigDict(extra="forbid")

    extras: str = Field("", description="lmmbench's extras to install, comma-separated, e.g. eval,serve (default: "
                        "none, the load-testing client).")  # fmt: skip
    python: str | None = Field(None, description="Python version X.Y of the image: the base's python3 when it is "
                               "that version, else a build uv downloads; refused when neither is there (default: "
                               "the base's python3).")  # fmt: skip
    base: str | None = Field(None, description="An image with python3 to build on, instead of the Debian base "
                             "made with debootstrap.")  # fmt: skip

    @field_validator("python")
    @classmethod
    def _a_version(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"3\.\d{1,2}", value):
            raise ValueError(f"{value!r} is not a Python version X.Y such as 3.11")
        return value

    @property
    def extras_list(self) -> list[str]:
        """The extras, one per entry."""
        return [e.strip() for e in self.extras.split(",") if e.strip()]
