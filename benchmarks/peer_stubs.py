"""Stand-in modules for reading a peer's own source files (vLLM's or SGLang's benchmark modules) without
installing the peer: every module but the few real ones is a ``Stub`` whose attributes are do-nothing
classes. Used by the ``extract_*_bench_flags.py`` scripts, which run the peer's argument-parser code.
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["Stub", "StubLoader", "stub_class"]


def stub_class(name: str) -> type:
    """A class that accepts any arguments, any attribute, subclassing and subscripting, and does nothing."""
    return type(name, (), {"__init__": lambda s, *a, **k: None, "__call__": lambda s, *a, **k: None,
                           "__getattr__": lambda s, n: None, "__init_subclass__": classmethod(lambda c, **k: None),
                           "__class_getitem__": classmethod(lambda c, i: c)})  # fmt: skip


class Stub(types.ModuleType):
    """A module whose every attribute is a do-nothing class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        obj = stub_class(name)
        setattr(self, name, obj)
        return obj


class StubLoader:
    """Loads a ``Stub`` package for a module name a finder decided to stub."""

    def create_module(self, spec: Any) -> Any:
        module = Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: Any) -> None:
        del module
