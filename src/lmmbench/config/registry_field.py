"""A config field whose value must be a registered name, checked against the registry at validation time.

``config`` sits below the layers that hold most registries (``loadgen.arrivals.ARRIVALS``,
``datasets.perf.registry.PERF_DATASETS``, ...), so the registry is named by a dotted path and
imported only when a value is validated::

    arrival: Annotated[str, registered_in("lmmbench.loadgen.arrivals:ARRIVALS")] = "poisson"

A name a plugin registers (entry points included) is valid the moment it is registered: there is no
``Literal`` copy of the names to keep in step. An unknown name fails validation with the known ones
listed, which ``core.errors.user_error_from_validation`` turns into the usual one-line error.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import AfterValidator

from lmmbench.core.registry import Registry

__all__ = ["registered_in", "registry_at", "registry_hint"]


def registry_at(path: str) -> Registry[Any]:
    """The registry at ``"package.module:NAME"``."""
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"registry path '{path}' must be 'package.module:NAME'")
    registry = getattr(importlib.import_module(module_name), attr)
    if not isinstance(registry, Registry):
        raise TypeError(f"{path} is a {type(registry).__name__}, not a Registry")
    return registry


class _RegisteredName:
    """The check of one registry field; ``registry_path`` lets the CLI list the names in its help."""

    def __init__(self, path: str) -> None:
        self.registry_path = path

    def __call__(self, value: Any) -> Any:
        if value is None:
            return value
        registry = registry_at(self.registry_path)
        if value not in registry:
            known = ", ".join(registry.names()) or "(none)"
            raise ValueError(f"unknown {registry.kind} '{value}'; known: {known}")
        return value


def registered_in(path: str) -> AfterValidator:
    """A validator (for ``Annotated[str, ...]`` or ``Annotated[str | None, ...]``) that accepts only names
    registered in the registry at ``path`` (``"package.module:NAME"``), imported on first use."""
    return AfterValidator(_RegisteredName(path))


def registry_hint(metadata: list[Any]) -> str:
    """The help hint of a field whose ``metadata`` holds a ``registered_in`` check ("" for any other):
    the names registered so far (plugins are not imported for a help text) and that plugins add more."""
    for meta in metadata:
        check = getattr(meta, "func", None)
        if isinstance(check, _RegisteredName):
            names = ", ".join(sorted(registry_at(check.registry_path).entries))
            return f"one of: {names}, or a plugin's"
    return ""
