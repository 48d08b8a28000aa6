"""Derive CLI options from a pydantic config model, so the CLI is never a hand copy of it.

``command_from_model(app, "name", Model, handler)`` adds a typer command whose options are
the model's fields (``max_tokens`` becomes ``--max-tokens``, help from the field's
description, defaults from the model). Values the user did not give are left out, so the
model's defaults (or a config file given with ``--config``) decide. Lists take
comma-separated values; dicts take ``key=value,key=value``; ``Literal`` fields list their
choices in the help. A validation error becomes one ``UserError`` line naming the field.
The loaders (``load_config_file``, ``parse_model``) live in the typer-free ``config.loaders``;
they are re-exported here for the commands.

A model may name extra flags for a field in ``CLI_ALIASES`` (a class attribute mapping a
field name to flags, e.g. ``{"num_requests": ("--num-prompts",)}``): each alias is its own option
(so its help says whose alias it is) and ``on_aliases`` is told which aliases were used (on every call).
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
from pydantic import BaseModel
from rich.markup import escape as markup_escape

from lmmbench.config.loaders import load_config_file, parse_model
from lmmbench.config.registry_field import registry_hint
from lmmbench.core.errors import UserError

M = TypeVar("M", bound=BaseModel)

__all__ = ["COMMON_PANELS", "command_from_model", "load_config_file", "panel_of", "parse_model"]

_SCALARS: tuple[type, ...] = (str, int, float, Path)

#: Help panel of fields that mean the same thing in every command; a model's own ``cli_panels``
#: (panel -> field names) comes first, and any other field goes to "Options".
COMMON_PANELS: dict[str, tuple[str, ...]] = {
    "Model and device": ("model", "device", "dtype", "threads", "hooks"),
    "Output": ("out_dir", "out", "run_name", "resume", "progress", "plots", "keep_text", "labels", "store",
               "json_output"),
    "Tracking": ("mlflow", "wandb"),
}  # fmt: skip


def panel_of(model: type[BaseModel], field_name: str) -> str:
    """The help panel ``field_name`` of ``model`` is listed under."""
    own: dict[str, tuple[str, ...]] = getattr(model, "cli_panels", {})
    for panel, names in [*own.items(), *COMMON_PANELS.items()]:
        if field_name in names:
            return panel
    return "Options"


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


def _convert_pairs(raw: str, flag: str) -> dict[str, str]:
    """``key=value,key=value`` (or ``key:value``) as a mapping: a key given twice, or a value that is a URL
    without its ``key=`` (``http://...`` is not ``http`` = ``//...``), is refused naming the flag."""
    out: dict[str, str] = {}
    for part in raw.replace(",", " ").split():
        sep = "=" if "=" in part else ":"
        if sep not in part or (sep == ":" and "://" in part):
            raise UserError(f"{flag} {part!r}: expected KEY=VALUE (e.g. NAME=http://host:port)")
        k, v = (x.strip() for x in part.split(sep, 1))
        if k in out:
            raise UserError(f"{flag}: {k!r} is given twice; each key once")
        out[k] = v
    return out


def _convert(tp: Any, raw: Any, flag: str = "option") -> Any:
    tp = _unwrap_optional(tp)
    origin = get_origin(tp)
    if not isinstance(raw, str):
        return raw
    if origin in (list, tuple, set):
        return [p.strip() for p in raw.split(",") if p.strip()]
    if origin is dict:
        return _convert_pairs(raw, flag)
    if origin is Literal or tp in _SCALARS or tp is bool:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _alias_options(model: type[BaseModel], fields: dict[str, Any]) -> tuple[dict[str, tuple[str, str]],
                                                                           list[inspect.Parameter]]:  # fmt: skip
    """One option per flag of the model's ``CLI_ALIASES``: {parameter name: (field, flag)} and the parameters."""
    aliases: dict[str, tuple[str, str]] = {}
    params: list[inspect.Parameter] = []
    for fname, flags in dict(getattr(model, "CLI_ALIASES", {})).items():
        if fname not in fields:
            continue
        cli_tp, _ = _cli_type(fields[fname].annotation)
        for j, flag in enumerate(flags):
            pname = f"{fname}__alias{j}"
            aliases[pname] = (fname, flag)
            info = typer.Option(None, flag, help=f"Alias of --{fname.replace('_', '-')}.", show_default=False,
                                metavar="" if cli_tp is bool else None)
            params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=info,
                                            annotation=cli_tp | None))  # fmt: skip
    return aliases, params


def _register_secrets(cfg: BaseModel) -> None:
    """Values of secret fields (``api_key``, headers) are masked in every file and log line from now on."""
    from lmmbench.core.secrets import SECRET_KEYS, register_secret

    for key, value in cfg.model_dump().items():
        if key.lower() in SECRET_KEYS:
            for v in value.values() if isinstance(value, dict) else [value]:
                register_secret(str(v) if v is not None else None)


def _shown_default(field: Any) -> str:
    """A field's default as the help shows it (lists and dicts comma-joined; ``""`` for none)."""
    if field.is_required():
        return ""
    default_val = field.get_default(call_default_factory=True)
    if isinstance(default_val, (list, tuple)) and default_val:
        return ",".join(str(x) for x in default_val)
    if isinstance(default_val, dict) and default_val:
        return ",".join(f"{k}={v}" for k, v in default_val.items())
    if isinstance(default_val, BaseModel) or default_val is None:
        return ""
    return str(default_val)


def _field_param(model: type[BaseModel], fname: str, field: Any, positional: tuple[str, ...]) -> inspect.Parameter:
    """The typer parameter of one model field: its flag (or argument), help text, panel and type."""
    cli_tp, hint = _cli_type(field.annotation)
    hint = registry_hint(field.metadata) or hint
    desc = (field.description or "").strip()
    if hint:
        desc = f"{desc} ({hint})" if desc else hint
    desc = markup_escape(desc)  # `lmmbench[libero]`: rich would read `[libero]` as a style tag and drop it
    shown = _shown_default(field)
    if shown:
        desc = f"{desc} \\[default: {shown}]"  # escaped: rich markup would eat it
    opt_name = "--" + fname.replace("_", "-")
    panel = panel_of(model, fname)
    if fname in positional:
        if get_origin(_unwrap_optional(field.annotation)) in (list, tuple, set):
            cli_tp = list[str]  # any number of values
        info: Any = typer.Argument(None, help=desc, show_default=False)
    elif cli_tp is bool:
        flags = f"{opt_name}/--no-{fname.replace('_', '-')}"
        # An empty metavar (public typer API) keeps a ``<bool>`` label off flags in every typer version.
        info = typer.Option(None, flags, help=desc, show_default=False, rich_help_panel=panel, metavar="")
    else:
        info = typer.Option(None, opt_name, help=desc, show_default=False, rich_help_panel=panel)
    return inspect.Parameter(fname, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=cli_tp | None)


def _config_file_param() -> inspect.Parameter:
    """The ``--config`` option every derived command takes unless told not to."""
    return inspect.Parameter(
        "config_file",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(None, "--config", help="YAML/JSON file with any of these options."),
        annotation=Path | None,
    )


def _collect_options(
    kwargs: dict[str, Any], fields: dict[str, Any], aliases: dict[str, tuple[str, str]]
) -> tuple[dict[str, Any], list[str]]:
    """The config mapping from a call's keyword arguments (config file first, given options over it),
    and the alias flags that were used."""
    data: dict[str, Any] = {}
    cfg_path = kwargs.pop("config_file", None)
    if cfg_path is not None:
        data.update(load_config_file(Path(cfg_path)))
    used: list[str] = []
    for key, raw in kwargs.items():
        if raw is None or (isinstance(raw, (list, tuple)) and not raw):
            continue
        if key in aliases:
            key, flag = aliases[key]
            used.append(flag)
        data[key] = _convert(fields[key].annotation, raw, "--" + key.replace("_", "-"))
    return data, used


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
    on_aliases: Callable[[list[str]], None] | None = None,
) -> None:
    """Add command ``name`` to ``app`` with one option per field of ``model`` (and per alias)."""
    own = getattr(model, "__annotations__", {})  # the model's own fields first, inherited ones after
    ordered = sorted(model.model_fields.items(), key=lambda kv: kv[0] not in own)
    fields = {k: f for k, f in ordered if k not in exclude}
    aliases, alias_params = _alias_options(model, fields)
    params = [_field_param(model, fname, field, positional) for fname, field in fields.items()]
    params += alias_params
    if with_config_file:
        params.append(_config_file_param())

    def _cmd(**kwargs: Any) -> Any:
        data, used = _collect_options(kwargs, fields, aliases)
        if on_aliases is not None:
            on_aliases(used)
        cfg = parse_model(model, data, source=f"'{name}' options")
        _register_secrets(cfg)
        return handler(cfg)

    _cmd.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    _cmd.__name__ = name.replace("-", "_")
    _cmd.__doc__ = help or (model.__doc__ or "").strip()
    app.command(name=name, help=_cmd.__doc__)(_cmd)
