"""Loopback networking helpers shared by servers, specs, benchmarks and tests."""

from __future__ import annotations

import socket

__all__ = ["ensure_port_free", "foreign_listener", "free_loopback_port"]


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_port_free(host: str, port: int, what: str = "--port") -> None:
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
                f"stop it or choose another {what}"
            ) from None


def _listeners(port: int) -> list[int]:
    """The pids with a TCP socket listening on ``port`` that this user can see (others' are left out)."""
    import psutil

    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    return sorted({c.pid for c in conns
                   if c.pid and c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port})  # fmt: skip


def foreign_listener(port: int, pid: int) -> str | None:
    """Who answers on ``port`` when it is not the process ``pid`` started: a process listening there that is
    neither ``pid`` nor one of its children and was already running when ``pid`` started (a container
    engine's port forwarder, started after it, counts as its own). None when the listener is ``pid``'s, or
    when no listener can be seen (another user's: the port was checked free before ``pid`` started)."""
    import psutil

    try:
        leader = psutil.Process(pid)
        tree = {pid, *(c.pid for c in leader.children(recursive=True))}
        started = leader.create_time()
    except psutil.Error:
        tree, started = {pid}, 0.0
    seen = _listeners(port)
    if not seen or tree & set(seen):
        return None
    for other in seen:
        try:
            proc = psutil.Process(other)
            if proc.create_time() < started:
                return f"pid {other} ({proc.name()})"
        except psutil.Error:
            continue
    return None
