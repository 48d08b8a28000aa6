"""Stop signals: which one ended a run, and handlers that act in lmmbench's own process only.

The CLI's SIGTERM handler and the load driver's signal handlers record the signal here, so the one
error boundary (``lmmbench.cli.main``) returns the right exit code (SIGINT 130, SIGTERM 143) after
every file was flushed. A handler installed with ``install_main_only`` acts in the process that
installed it: a process forked from it (lm-eval's bootstrap pool, a datasets or torch worker, any
``multiprocessing`` fork) starts with the default handler again, and should it still run there, it
restores the default and lets the signal do what it does by default.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["exit_code_for_stop", "install_main_only", "record_stop_signal", "stop_signal"]

Handler = Callable[[int, FrameType | None], Any]

_seen: list[int] = []
_mine: dict[int, Handler] = {}  # signal -> the main-only wrapper installed for it (this process)


def record_stop_signal(signum: int) -> None:
    """Remember that ``signum`` asked this process to stop."""
    _seen.append(int(signum))


def exit_code_for_stop() -> int:
    """143 if a SIGTERM was recorded, else 130 (Ctrl-C)."""
    return 143 if int(signal.SIGTERM) in _seen else 130


def _default(signum: int) -> Any:
    """Python's own handler of ``signum`` at start-up (KeyboardInterrupt for SIGINT, else the OS default)."""
    return signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL


def _act_as_default(signum: int, frame: FrameType | None) -> None:
    default = _default(signum)
    with contextlib.suppress(ValueError):
        signal.signal(signum, default)
    if default is signal.SIG_DFL:
        os.kill(os.getpid(), signum)  # delivered again, now with the default action
    else:
        default(signum, frame)


def _defaults_in_child() -> None:
    """After a fork: every handler installed with ``install_main_only`` is back to its default."""
    for signum, wrapper in list(_mine.items()):
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signum) is wrapper:
                signal.signal(signum, _default(signum))
    _mine.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_defaults_in_child)


def install_main_only(signum: int, handler: Handler) -> Any:
    """Install ``handler`` for ``signum`` in this process only; returns the previous handler (for ``signal.signal``
    to restore). Raises ``ValueError`` off the main thread, as ``signal.signal`` does."""
    pid = os.getpid()

    def wrapper(num: int, frame: FrameType | None) -> Any:
        if os.getpid() != pid:  # a forked child that kept the handler (a fork outside os.fork's hooks)
            return _act_as_default(num, frame)
        return handler(num, frame)

    previous = signal.signal(signum, wrapper)
    _mine[int(signum)] = wrapper
    return previous


def stop_signal() -> int:
    """The signal a stop should pass on: SIGTERM if one was recorded, else SIGINT (Ctrl-C)."""
    return int(signal.SIGTERM) if int(signal.SIGTERM) in _seen else int(signal.SIGINT)
