"""`lmmbench serve` as users start it: a subprocess on a loopback port; bad options exit 2."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
from serve_helpers import free_port

LMMBENCH = str(Path(sys.executable).parent / "lmmbench")


def test_serve_command_starts_answers_and_stops() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [LMMBENCH, "serve", "--model", "tiny-llm", "--port", str(port), "--no-warmup", "--max-queue", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        out = httpx.post(
            url + "/v1/completions", json={"model": "tiny-llm", "prompt": "hi", "max_tokens": 3}, timeout=30
        )
        assert out.status_code == 200 and out.json()["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.stdout is not None and f"http://127.0.0.1:{port}" in proc.stdout.read()


def test_bad_serve_option_is_one_line_and_exit_2() -> None:
    res = subprocess.run([LMMBENCH, "serve", "--max-batch-size", "0"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "max_batch_size" in res.stderr and "Traceback" not in res.stderr
