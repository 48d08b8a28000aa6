"""Derive CLI options from a pydantic config model, so the CLI is never a hand copy of it.

``command_from_model(app, "name", Model, handler)`` adds a typer command whose options are
the model's fields (``max_tokens`` becomes ``--max-tokens``, help from the field's
description, defaults from the model). Values the user did not give are left out, so the
model's defaults (or a config file given with ``--config``) decide. Lists take
comma-separated values; dicts take ``key=value,key=value``; ``Literal`` fields list their
choices in the help. A validation error becomes one ``UserError`` line naming the field.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError

from lmmbench.core.errors import UserError

M = TypeVar("M", bound=BaseModel)

__all__ = ["command_from_model", "load_config_file", "parse_model", "validation_message"]

_SCALARS: tuple[type, ...] = (str, int, float, Path)


def _unwrap_optional(tp: Any) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        return str
    return tp


def _cli_type(tp: Any) -> tuple[Any, str]:
    """The type typer sees for a field and a hint for the help text."""
    tp = _unwrap_optional(tp)
    origin = get_origin(tp)
    if origin is Literal:
        return str, "one of: " + ", ".join(str(a) for a in get_args(tp))
    if origin in (list, tuple, set):
        return str, "comma-separated"
    if origin is dict:
        return str, "key=value,key=value"
    if tp is bool:
        return bool, ""
    if tp in _SCALARS:
        return tp, ""
    return str, "JSON"


def _convert(tp: Any, raw: Any) -> Any:
    tp = _unwrap_optional(tp)
    origin = get_origin(tp)
    if not isinstance(raw, str):
        return raw
    if origin in (list, tuple, set):
        return [p.strip() for p in raw.split(",") if p.strip()]
    if origin is dict:
        out: dict[str, str] = {}
        for part in raw.split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise UserError(f"expected key=value, got '{part}'")
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
        return out
    if origin is Literal or tp in _SCALARS or tp is bool:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def validation_message(exc: ValidationError, source: str = "options") -> str:
    """One readable line for a pydantic validation error."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return f"invalid {source}: " + "; ".join(parts)


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
        raise UserError(validation_message(exc, source)) from None


def _register_secrets(cfg: BaseModel) -> None:
    """Values of secret fields (``api_key``, headers) are masked in every file and log line from now on."""
    from lmmbench.core.secrets import SECRET_KEYS, register_secret

    for key, value in cfg.model_dump().items():
        if key.lower() in SECRET_KEYS:
            for v in value.values() if isinstance(value, dict) else [value]:
                register_secret(str(v) if v is not None else None)


def command_from_model(
    app: typer.Typer,
    name: str,
    model: type[M],
    handler: Callable[[M], Any],
    *,
    help: str | None = None,
    exclude: set[str] | frozenset[str] = frozenset(),
    positional: tuple[str, ...] = (),
    with_config_file: bool = True,
) -> None:
    """Add command ``name`` to ``app`` with one option per field of ``model``."""
    params: list[inspect.Parameter] = []
    fields = {k: f for k, f in model.model_fields.items() if k not in exclude}
    for fname, field in fields.items():
        cli_tp, hint = _cli_type(field.annotation)
        desc = (field.description or "").strip()
        if hint:
            desc = f"{desc} ({hint})" if desc else hint
        if not field.is_required():
            default_val = field.get_default(call_default_factory=True)
            if isinstance(default_val, (list, tuple)) and default_val:
                shown = ",".join(str(x) for x in default_val)
            elif isinstance(default_val, dict) and default_val:
                shown = ",".join(f"{k}={v}" for k, v in default_val.items())
            elif isinstance(default_val, BaseModel):
                shown = ""
            else:
                shown = "" if default_val is None else str(default_val)
            if shown:
                desc = f"{desc} \\[default: {shown}]"  # escaped: rich markup would eat it
        opt_name = "--" + fname.replace("_", "-")
        if fname in positional:
            info: Any = typer.Argument(None, help=desc, show_default=False)
        elif cli_tp is bool:
            flags = f"{opt_name}/--no-{fname.replace('_', '-')}"
            info = typer.Option(None, flags, help=desc, show_default=False)
        else:
            info = typer.Option(None, opt_name, help=desc, show_default=False)
        params.append(
            inspect.Parameter(fname, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=cli_tp | None)
        )
    if with_config_file:
        params.append(
            inspect.Parameter(
                "config_file",
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(None, "--config", help="YAML/JSON file with any of these options."),
                annotation=Path | None,
            )
        )

    def _cmd(**kwargs: Any) -> Any:
        data: dict[str, Any] = {}
        cfg_path = kwargs.pop("config_file", None)
        if cfg_path is not None:
            data.update(load_config_file(Path(cfg_path)))
        for key, raw in kwargs.items():
            if raw is None:
                continue
            data[key] = _convert(fields[key].annotation, raw)
        cfg = parse_model(model, data, source=f"'{name}' options")
        _register_secrets(cfg)
        return handler(cfg)

    _cmd.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    _cmd.__name__ = name.replace("-", "_")
    _cmd.__doc__ = help or (model.__doc__ or "").strip()
    app.command(name=name, help=_cmd.__doc__)(_cmd)
