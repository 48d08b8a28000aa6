"""Loopback networking helpers shared by servers, specs, benchmarks and tests."""

from __future__ import annotations

import socket

__all__ = ["ensure_port_free", "free_loopback_port"]


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    """Raise ``UserError`` (one line, exit 2) when ``host:port`` cannot be bound right now.

    The probe binds without ``SO_REUSEPORT``, so a port held by a server that set it (a multi-worker
    testserver) counts as taken too: two servers never silently share a port.
    """
    if port == 0:
        return
    from lmmbench.core.errors import UserError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers are not "taken"
        try:
            s.bind((host, port))
        except OSError as exc:
            raise UserError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server holds it?); "
                f"stop it or choose another --port"
            ) from None
