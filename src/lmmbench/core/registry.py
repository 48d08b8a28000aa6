"""One typed registry per extension kind, with entry-point plugins.

A ``Registry[T]`` maps a name to an object of type ``T`` (a spec, a model family, a
backend, a metric, ...). Names are registered with a decorator or ``add``; registering a
name twice is an error. Third-party packages add entries through the entry-point group
``lmmbench.<kind>``: each entry point names an object to import, which is registered on
first lookup. Loading a plugin that fails is reported, never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from lmmbench.core.errors import UserError

T = TypeVar("T")
log = logging.getLogger(__name__)

__all__ = ["Registry", "RegistryError"]


class RegistryError(UserError):
    """A name is registered twice, or a looked-up name is unknown."""


class Registry(Generic[T]):
    """A named collection of extensions of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._plugins_loaded = False
        self._failed: set[str] = set()  # plugins whose loading failed: tried again when asked for by name

    @property
    def entry_point_group(self) -> str:
        """The entry-point group third-party packages use to add entries."""
        return f"lmmbench.{self.kind}"

    def add(self, name: str, item: T) -> T:
        """Register ``item`` under ``name``; a second registration of a name is an error."""
        if name in self._items and self._items[name] is not item:
            raise RegistryError(f"{self.kind} '{name}' is already registered")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of ``add``."""

        def deco(item: T) -> T:
            return self.add(name, item)

        return deco

    def _load_plugins(self, name: str | None = None) -> None:
        """Load every plugin of the group once; later, only ``name`` again if it failed before (a plugin
        module that was still being imported when first asked for loads fine the second time)."""
        first = not self._plugins_loaded
        if not first and (name is None or name not in self._failed):
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name in self._items or (not first and ep.name != name):
                continue
            try:
                self.add(ep.name, ep.load())
                self._failed.discard(ep.name)
            except Exception as exc:  # a broken plugin must not break the tool
                self._failed.add(ep.name)
                log.warning("could not load %s plugin %r: %s", self.kind, ep.name, exc)

    def get(self, name: str) -> T:
        """The entry named ``name``; an unknown name raises with the known names listed."""
        if name not in self._items:
            self._load_plugins(name)
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "(none)"
            raise RegistryError(f"unknown {self.kind} '{name}'; known: {known}") from None

    @property
    def entries(self) -> dict[str, T]:
        """The live name -> entry mapping (entry-point plugins join it on first lookup); tests swap an
        entry in for a while with ``monkeypatch.setitem(registry.entries, name, item)``."""
        return self._items

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._load_plugins()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._items:
            self._load_plugins(name)
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
