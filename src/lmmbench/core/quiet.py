"""A third-party library's terminal output sent to a log file, so that lmmbench's one line stands alone.

Libraries lmmbench drives (lm-eval, ``datasets``, the ``git describe`` lm-eval runs for its run record) write
progress bars, warnings and ``fatal: not a git repository`` to the process's standard error. ``stderr_to_file``
points file descriptor 2 itself at a file for the duration of a call: Python's ``sys.stderr``, C libraries and
child processes alike. With ``--verbose`` (the root logger at DEBUG) nothing is redirected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["stderr_to_file"]


@contextlib.contextmanager
def stderr_to_file(path: Path) -> Iterator[None]:
    """File descriptor 2 appended to ``path`` for the block (unchanged under ``--verbose``)."""
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as fh, open(fh.fileno(), "w", encoding="utf-8", errors="replace", closefd=False) as text:
            os.dup2(fh.fileno(), 2)
            try:  # sys.stderr too, for when it is not file descriptor 2 (a test's capture, an embedding host)
                with contextlib.redirect_stderr(text):
                    yield
            finally:
                with contextlib.suppress(Exception):
                    text.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)
