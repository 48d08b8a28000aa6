"""``lmmbench serve-policy`` in a subprocess, for the served-policy tests: started, found listening, stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
#: lmmbench's CLI run by any Python (another venv's too) with this checkout's ``src`` on its path.
MAIN = "import sys; from lmmbench.cli.main import main; sys.exit(main(sys.argv[1:]))"


@contextmanager
def serve_policy(*args: str, python: str | Path = sys.executable,
                 host: str = "127.0.0.1") -> Iterator[tuple[subprocess.Popen[str], int]]:  # fmt: skip
    """``lmmbench serve-policy ARGS`` (give ``--port``; ``0`` picks a free one) in a subprocess of ``python``: the
    process and its port (read from the line it prints) once ``/healthz`` on ``host`` answers. Stopped by its pid
    afterwards, whatever the test did to it: SIGTERM (it writes ``--metrics-out`` then), SIGKILL after 60 s."""
    argv = [str(python), "-c", MAIN, "serve-policy", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": SRC})  # fmt: skip
    try:
        assert proc.stdout is not None
        line = ""
        while "serving" not in line:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "serve-policy exited before listening"
        port = int(line.split("ws://")[1].split()[0].rsplit(":", 1)[1])
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=30) as resp:
            assert resp.read() == b"OK\n"
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
