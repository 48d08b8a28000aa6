"""Processes lmmbench starts and must not outlive it: plan workers, serve-row servers, ``perf --server-cmd``.

Each starts in its own process group (``start_new_session``), so that a stop reaches the whole group
(an engine's own workers too) and a terminal's Ctrl-C reaches lmmbench first, which stops them in order.
``preexec_die_with_parent`` makes the child end with lmmbench on Linux (``PR_SET_PDEATHSIG``: SIGTERM
when the parent dies, even by SIGKILL); the signal is tied to the *thread* that started the child, so
start children from a thread that outlives them (the main thread, or a pool thread that waits on them).
``stop_groups`` signals every group at once, gives them ``grace_s`` seconds to write what they measured,
then kills what is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["preexec_die_with_parent", "start_group", "stop_groups"]

PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's ``prctl``, looked up in the parent (the child between fork and exec only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def preexec_die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGTERM when this process dies (Linux), and
    exits at once when this process died before the call (its parent is then another process)."""
    parent = os.getpid()
    prctl = _prctl()

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def start_group(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, ...)`` as the leader of a new process group that dies with this process."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=preexec_die_with_parent(), **popen)


def _signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def stop_groups(procs: Iterable[subprocess.Popen[Any]], signum: int = signal.SIGTERM, grace_s: float = 10.0) -> None:
    """Send ``signum`` to each process group led by ``procs`` at once, wait up to ``grace_s`` seconds for the
    leaders to exit, then SIGKILL every group (what is left of it: a worker that ignored the signal)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signum)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
