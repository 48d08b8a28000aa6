"""The library's config loaders: read a YAML / JSON config file, validate a mapping into a model.

Library callers (sessions, plans, jobs) use these; they import no typer. The CLI derives its
options from the same models in ``config.cli_options`` and calls these loaders too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from lmmbench.core.errors import UserError, user_error_from_validation

M = TypeVar("M", bound=BaseModel)

__all__ = ["load_config_file", "parse_model"]


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON mapping, with one clear error if it is missing or malformed."""
    from lmmbench.config.input_files import load_yaml, read_text

    data = load_yaml(read_text(path, "config file"), path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level")
    return data


def parse_model(model: type[M], data: dict[str, Any], source: str = "options") -> M:
    """Validate ``data`` into ``model``; errors become a ``UserError`` naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise user_error_from_validation(exc, f"invalid {source}", more=True) from None
