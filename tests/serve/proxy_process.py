"""``lmmbench proxy`` in a subprocess, for the proxy tests: started on a free port, found answering, stopped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def proxy_process(upstream: str, env: dict[str, str] | None = None,
                  timeout_s: float = 60.0) -> Iterator[tuple[str, subprocess.Popen[str]]]:  # fmt: skip
    """``lmmbench proxy --upstream UPSTREAM --port 0``: the URL it printed (the bound port) once ``/health`` answers
    (the upstream's own error passed through counts: the proxy is up), and the process, whose stdout and stderr
    stay readable after the block. RuntimeError when it exits before listening or does not answer within
    ``timeout_s``; SIGTERM afterwards, SIGKILL after 10 s."""
    proc = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main", "proxy", "--upstream", upstream, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})  # fmt: skip
    try:
        assert proc.stdout is not None
        found = re.search(r"http://127\.0\.0\.1:(\d+) ", proc.stdout.readline())
        if found is None or found.group(1) == "0":
            proc.wait(10)
            raise RuntimeError(f"proxy exited early: {(proc.stderr.read() if proc.stderr else '').strip()[-500:]}")
        url = f"http://127.0.0.1:{found.group(1)}"
        _wait_until_it_answers(url, proc, timeout_s)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _wait_until_it_answers(url: str, proc: subprocess.Popen[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"proxy exited early: {(proc.stderr.read() if proc.stderr else '').strip()[-500:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return
        except urllib.error.HTTPError:  # the upstream's own answer, passed through: the proxy is up
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("proxy did not answer in time") from None
            time.sleep(0.1)


@contextmanager
def running_proxy(upstream: str, timeout_s: float = 60.0) -> Iterator[str]:
    """``proxy_process`` when only the URL matters."""
    with proxy_process(upstream, timeout_s=timeout_s) as (url, _):
        yield url
