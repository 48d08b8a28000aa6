"""Registry, typed records, errors and the clock; imports nothing heavy."""

from lmmbench.core.clock import now_ns, ns_to_ms, wall_label
from lmmbench.core.errors import MissingExtraError, UserError, require
from lmmbench.core.registry import Registry, RegistryError

__all__ = [
    "MissingExtraError",
    "Registry",
    "RegistryError",
    "UserError",
    "now_ns",
    "ns_to_ms",
    "require",
    "wall_label",
]
