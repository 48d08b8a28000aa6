"""Loopback networking helpers shared by servers, specs, benchmarks and tests."""

from __future__ import annotations

import socket

__all__ = ["free_loopback_port"]


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
