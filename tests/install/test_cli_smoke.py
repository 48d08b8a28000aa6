"""The install smoke: every command's help, and one real run of each main job.

``scripts/test.sh`` runs this module on every leg: the main venv, the lowest versions pyproject admits
(``.venv-floor``) and a stock GPU image's package set (``.venv-gpuimage``: typer 0.27.2, click 8.5.0,
transformers 5.17.0, ...). A command that dies at import on one of those legs fails here, on CPU, before a user
sees it. The command list is read from the CLI itself, so a new command is covered without an edit here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import build_app, main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.testing.fixtures import running_testserver

CLI = [sys.executable, "-m", "lmmbench.cli.main"]


def _command_paths() -> list[list[str]]:
    """Every command and subcommand of ``lmmbench``, as argv prefixes (duck-typed: typer may vendor click)."""
    from typer.main import get_command

    def walk(cmd: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        if hasattr(cmd, "list_commands"):
            ctx = type(cmd).context_class(cmd) if hasattr(type(cmd), "context_class") else None
            for name in cmd.list_commands(ctx):
                yield from walk(cmd.get_command(ctx, name), [*path, name])

    return list(walk(get_command(build_app()), []))


PATHS = _command_paths()


def test_the_cli_lists_its_commands() -> None:
    names = {" ".join(p) for p in PATHS}
    for expected in ("perf", "eval", "serve", "run ttft-breakdown", "bench serve", "bench sglang", "batch"):
        assert expected in names, sorted(names)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "lmmbench")
def test_help_exits_0(path: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr()
    assert "usage" in out.out.lower(), out
    assert "Traceback" not in out.err and "error" not in out.err.lower(), out.err


def test_console_entry_point_imports() -> None:
    """``python -m lmmbench.cli.main --version`` in a fresh process: the whole import chain of the command."""
    proc = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("lmmbench "), proc.stdout


def test_perf_against_the_test_server(tmp_path: Path, port: int) -> None:
    with running_testserver(TestServerConfig(port=port, ttft_ms=5, itl_ms=1, output_tokens=4)) as url:
        proc = subprocess.run(
            [*CLI, "perf", "--url", url, "--num-requests", "6", "--concurrency", "2", "--out-dir", str(tmp_path / "p")],
            capture_output=True, text=True, timeout=180,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list((tmp_path / "p").rglob("*records*.jsonl")) + list((tmp_path / "p").rglob("summary.csv"))
    assert rows, sorted(str(p) for p in (tmp_path / "p").rglob("*"))


def test_ttft_breakdown_on_tiny_omni(tmp_path: Path) -> None:
    out = tmp_path / "t"
    proc = subprocess.run(
        [*CLI, "run", "ttft-breakdown", "--model", "tiny-omni", "--limit", "1", "--repeats", "1", "--warmup", "1",
         "--threads", "1", "--out-dir", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = out / "ttft-breakdown" / "ttft-breakdown_results.csv"
    lines = results.read_text().splitlines()
    assert len(lines) >= 2, lines
    header = lines[0].split(",")
    assert "ttft_ms" in header and "visual_encoder_ms" in header, header


def test_eval_on_a_shipped_task(tmp_path: Path) -> None:
    out = tmp_path / "e"
    proc = subprocess.run(
        [*CLI, "eval", "--model", "tiny-llm", "--tasks", "sample_mc", "--limit", "4", "--threads", "1",
         "--out-dir", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(out.rglob("*predictions*")), sorted(str(p) for p in out.rglob("*"))


def test_serve_answers_one_request(tmp_path: Path, port: int) -> None:
    env = {**os.environ, "LMMBENCH_HOME": os.environ["LMMBENCH_HOME"]}
    proc = subprocess.Popen(
        [*CLI, "serve", "--model", "tiny-llm", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "serve did not answer in 120 s"
                time.sleep(0.2)
        body = json.dumps({"model": "tiny-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
        req = urllib.request.Request(url + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["choices"][0]["message"]["content"] is not None
        assert answer["usage"]["completion_tokens"] >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
