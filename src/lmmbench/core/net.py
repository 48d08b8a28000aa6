"""Loopback networking helpers shared by servers, specs, benchmarks and tests."""

from __future__ import annotations

import os
import socket
from pathlib import Path

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


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP ``port`` (Linux ``/proc/net/tcp``, ``tcp6``; empty elsewhere)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(cols[9])
    return inodes


def _listeners(port: int) -> list[int]:
    """The pids holding a TCP socket that listens on ``port``, of the processes this user can look into."""
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port)}
    pids: list[int] = []
    for proc in Path("/proc").glob("[0-9]*") if inodes else []:
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def _started(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22); None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _tree(pid: int) -> set[int]:
    """``pid`` and its descendants (``/proc/PID/task/*/children``)."""
    tree, todo = {pid}, [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = {int(k) for k in (task / "children").read_text(encoding="ascii").split()}
            except (OSError, ValueError):
                continue
            todo += sorted(kids - tree)
            tree |= kids
    return tree


def foreign_listener(port: int, pid: int) -> str | None:
    """Who answers on ``port`` when it is not the process ``pid`` started: a process listening there that is
    neither ``pid`` nor one of its children and was already running when ``pid`` started (a container
    engine's port forwarder, started after it, counts as its own). None when the listener is ``pid``'s, or
    when no listener can be seen (another user's, or not Linux: the port was checked free before ``pid``
    started)."""
    seen = _listeners(port)
    if not seen or _tree(pid) & set(seen):
        return None
    leader = _started(pid)
    for other in seen:
        started = _started(other)
        if leader is not None and started is not None and started < leader:
            try:
                name = Path(f"/proc/{other}/comm").read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                name = "?"
            return f"pid {other} ({name})"
    return None
