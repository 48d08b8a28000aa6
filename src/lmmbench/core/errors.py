"""Errors the CLI turns into one clear line and a non-zero exit code."""

from __future__ import annotations

__all__ = ["MissingExtraError", "UserError", "require"]


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
