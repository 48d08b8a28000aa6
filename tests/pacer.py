"""A reference process for tests that wait for a stop, a start or a hand-off: the event must come before the pacer,
started at the same moment on the same machine, finishes a known amount of work.

A bare wall-clock deadline ("gone within 5 s") is a speed assertion: a machine busy with other work misses it
without a defect (issue 48: a plan found still alive at 5.03 s at load 3-6). The pacer feels the same load as what
the test waits for, so the budget stretches with it; what it proves is an order of events.

Its work: ``imports`` fresh interpreters, one after another, each importing lmmbench's CLI -- what every
lmmbench process does before it can act, and more than stopping needs (signal delivery, handlers flushing what
was measured, a few files written). One such import took 1.3-1.5 s on a 2-core AMD EPYC at load 12.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

_WORK = (
    "import subprocess, sys\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    subprocess.run([sys.executable, '-c', 'import ' + sys.argv[2]], check=True)\n"
)
#: The pacer's unit by default: what every lmmbench process imports before it can act.
CLI = "lmmbench.cli.main"
#: A heavier unit, for calls that load a model: what such a call imports first (torch with it).
MODEL_LIBS = "transformers.modeling_utils"


@contextlib.contextmanager
def pacer(imports: int = 3, module: str = CLI) -> Iterator[subprocess.Popen[bytes]]:
    """Start the pacer (``imports`` fresh imports of ``module`` in turn); it is ended when the block leaves."""
    proc = subprocess.Popen([sys.executable, "-c", _WORK, str(imports), module], stdout=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # with the interpreter it is running, if any
        proc.wait(timeout=30)


def before_pacer(done: Callable[[], bool], imports: int = 3, poll_s: float = 0.05) -> tuple[bool, float, float]:
    """Start a pacer now and poll ``done`` until it holds or the pacer finishes its work. Returns whether ``done``
    held first, the seconds until it held (or until the pacer finished) and the pacer's seconds (or -1 while it
    was still running)."""
    t0 = time.monotonic()
    with pacer(imports) as ref:
        while not done():
            if ref.poll() is not None:
                assert ref.returncode == 0, f"the pacer failed ({ref.returncode}): it measures nothing"
                took = time.monotonic() - t0
                return done(), took, took
            time.sleep(poll_s)
        return True, time.monotonic() - t0, -1.0


def returns_before_pacer(call: Callable[[], T], imports: int, module: str = CLI) -> tuple[T, bool]:
    """Run ``call`` while a pacer of ``imports`` fresh imports of ``module`` runs beside it: its result, and whether
    it returned before the pacer finished -- "refused quickly, no hang" as an order of events rather than a
    deadline. Each test states ``imports`` against what its call does: a refusal that imports nothing heavy needs a
    few CLI imports; one that loads a model counts in ``MODEL_LIBS`` imports (torch and transformers, which the
    call imports too when it is the first in its process)."""
    with pacer(imports, module) as ref:
        result = call()
        still_running = ref.poll() is None
        assert still_running or ref.returncode == 0, f"the pacer failed ({ref.returncode}): it measures nothing"
        return result, still_running
