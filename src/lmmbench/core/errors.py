"""Errors the CLI turns into one clear line and a non-zero exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["MissingExtraError", "UserError", "require", "user_error_from_validation", "validation_detail"]


class UserError(Exception):
    """Bad input from the user: reported as one line, exit code 2, never a traceback."""

    exit_code = 2


class MissingExtraError(UserError):
    """An optional dependency is not installed."""


def require(module: str, extra: str) -> None:
    """Fail with the exact ``pip install`` to run when ``module`` cannot be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(
            f"this needs the '{module}' package: pip install -c constraints.txt 'lmmbench[{extra}]'"
        )


def validation_detail(exc: ValidationError) -> tuple[str, str, int]:
    """The first error of a pydantic ``ValidationError``: (dotted field, message, how many more errors).

    The field is ``""`` for a model-level error; pydantic's "Value error, " prefix is dropped.
    """
    errors = exc.errors()
    err = errors[0]
    loc = ".".join(str(x) for x in err["loc"])
    return loc, str(err["msg"]).removeprefix("Value error, "), len(errors) - 1


def user_error_from_validation(
    exc: ValidationError, where: str = "", *, field: str = "{}", root: str = "(root)", more: bool = False
) -> UserError:
    """The one-line ``UserError`` for a pydantic ``ValidationError``: ``<where>: <field>: <what is wrong>``.

    ``where`` names the file (and line or row); ``field`` formats the dotted field name (e.g.
    ``"field '{}'"``, ``"options.{}"``); ``root`` stands for a model-level error; ``more`` appends
    how many further errors there are.
    """
    loc, msg, n_more = validation_detail(exc)
    label = field.format(loc) if loc else root
    tail = f" (+{n_more} more)" if more and n_more else ""
    return UserError(f"{where}: {label}: {msg}{tail}" if where else f"{label}: {msg}{tail}")
