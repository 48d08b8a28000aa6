"""Which stop signal ended a run: SIGINT (exit 130) or SIGTERM (exit 143).

The CLI's SIGTERM handler and the load driver's signal handlers record the signal here, so the one
error boundary (``lmmbench.cli.main``) returns the right exit code after every file was flushed.
"""

from __future__ import annotations

import signal

__all__ = ["exit_code_for_stop", "record_stop_signal"]

_seen: list[int] = []


def record_stop_signal(signum: int) -> None:
    """Remember that ``signum`` asked this process to stop."""
    _seen.append(int(signum))


def exit_code_for_stop() -> int:
    """143 if a SIGTERM was recorded, else 130 (Ctrl-C)."""
    return 143 if int(signal.SIGTERM) in _seen else 130
