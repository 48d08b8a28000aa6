"""``serve`` rows: a server (``lmmbench serve`` or ``lmmbench testserver``) started in the background
for the perf / eval rows that name it, ready before they start, stopped after they finish.

Options of a serve row are the server's own options (``command=testserver`` picks the test server,
default ``serve``); the port is chosen at run time on 127.0.0.1. ``wait_until_ready`` is the
readiness check of perf and eval (``backends.readiness``), watching the server process meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel

from lmmbench.core.errors import UserError
from lmmbench.executors.jobs import validate_options
from lmmbench.executors.plan import PlanRow

__all__ = ["RunningServer", "server_config", "start_server", "wait_until_ready"]

SERVER_COMMANDS = ("serve", "testserver")


def _config_model(command: str) -> type[BaseModel]:
    if command == "testserver":
        from lmmbench.config.perf_testserver import TestServerConfig

        return TestServerConfig
    from lmmbench.serve.server import ServeConfig

    return ServeConfig


def server_config(row: PlanRow) -> tuple[str, BaseModel]:
    """The server command of a serve row and its validated options (port 0 until it starts)."""
    opts = dict(row.options)
    command = str(opts.pop("command", "serve"))
    if command not in SERVER_COMMANDS:
        raise UserError(f"options.command: '{command}' is not one of {', '.join(SERVER_COMMANDS)}")
    if row.model is not None:
        opts["model"] = row.model
    return command, validate_options(_config_model(command), {**opts, "port": 0})


def _cli_args(cfg: BaseModel) -> list[str]:
    args: list[str] = []
    for key, value in cfg.model_dump(mode="json", exclude_unset=True).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{key.replace('_', '-')}")
        elif isinstance(value, dict):
            args += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        elif isinstance(value, list):
            args += [flag, ",".join(str(v) for v in value)]
        elif value is not None:
            args += [flag, str(value)]
    return args


def wait_until_ready(url: str, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Wait until the server at ``url`` answers, with the readiness check perf and eval use
    (``backends.readiness.wait_for_server``), in short slices so that a server process that exits
    (``alive()`` false) fails at once; ``UserError`` after ``timeout_s``."""
    from lmmbench.backends.readiness import wait_for_server

    deadline = time.monotonic() + timeout_s
    while True:
        if not alive():
            raise UserError(f"the server for {url} exited before it was ready")
        try:
            wait_for_server(url, None, min(1.0, max(0.1, deadline - time.monotonic())), notify=lambda _m: None)
            return
        except UserError as exc:
            if time.monotonic() >= deadline:
                raise UserError(f"{url}: not ready after {timeout_s:g} s ({exc})") from None


@dataclass
class RunningServer:
    """A started serve row: its process, URL and log file."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    _log: IO[bytes]

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; closes the log."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def start_server(row: PlanRow, row_dir: Path, timeout_s: float = 300.0) -> RunningServer:
    """Start ``row``'s server on a free loopback port, wait until it is ready, return it."""
    from lmmbench.core.net import free_loopback_port

    command, cfg = server_config(row)
    port = free_loopback_port()
    update: dict[str, Any] = {"port": port, "host": "127.0.0.1"}
    cfg = cfg.model_copy(update=update)
    cfg.model_fields_set.update(update)  # so the CLI flags carry them
    row_dir.mkdir(parents=True, exist_ok=True)
    log_path = row_dir / "server.log"
    log = log_path.open("wb")
    argv = [sys.executable, "-m", "lmmbench.cli.main", command, *_cli_args(cfg)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    server = RunningServer(row.name, proc, f"http://127.0.0.1:{port}/v1", log_path, log)
    try:
        wait_until_ready(server.url, timeout_s, alive=lambda: proc.poll() is None)
    except BaseException:
        server.stop()
        raise
    return server
