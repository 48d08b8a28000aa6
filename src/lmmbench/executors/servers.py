"""``serve`` rows: a server started in the background for the perf / eval rows that name it, ready
before they start, its ``/metrics`` sampled while they run, stopped (its whole process group) after. It leads
its own process group and dies with lmmbench (``core.children``: a SIGKILLed plan leaves no server behind).

``command`` is ``serve`` (default) or ``testserver`` -- lmmbench's own servers, whose other options are
the command's own -- or any server command line, as ``perf --server-cmd`` takes one:
``vllm serve {model} --port {port}``, ``python -m sglang.launch_server --model-path {model} --port
{port}``, ``text-generation-launcher --model-id {model} --port {port}``, ``llama-server -m {model}
--port {port}``, ``transformers serve {model} --port {port}``. ``{port}`` (required), ``{host}``,
``{model}`` (the row's model) and ``{python}`` (this interpreter) are filled in; the port is chosen at run
time on 127.0.0.1. lmmbench's own servers take a row's ``port`` (that port) and ``host`` (loopback or
every address; the rows reach it on 127.0.0.1). Such a server is ready when ``/health`` or ``/v1/models``
answers 200 (``readiness`` picks one; ``transformers serve`` answers ``/v1/models`` with 500 until its
cache folder exists), within ``ready_timeout_s``.
``wait_until_ready`` is the readiness check of perf and eval (``backends.readiness``) for lmmbench's own.

``proxy`` rows are ``lmmbench proxy`` (``serve.proxy.app``) in front of ``options.upstream`` (a URL, or a serve
row's name, replaced by that row's URL once it is ready: ``with_upstream``); they are started after the serve
rows, reached the same way, and sample no ``/metrics`` of their own (their upstream's serve row does).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lmmbench.config.limits import check_limit
from lmmbench.core.children import start_group, stop_groups
from lmmbench.core.errors import UserError
from lmmbench.core.net import ensure_port_free, foreign_listener
from lmmbench.core.placeholders import Fields, check, fill_argv
from lmmbench.executors.jobs import validate_options
from lmmbench.executors.plan import PlanRow

__all__ = ["CommandServer", "RunningServer", "is_command_line", "server_config", "start_server",
           "wait_for_command_server", "wait_until_ready", "with_upstream"]

SERVER_COMMANDS = ("serve", "testserver")
SERVER_FIELDS = ("port", "host", "model", "python")  # the placeholders of a serve row's command line
READINESS = ("auto", "/health", "/v1/models")


class CommandServer(BaseModel):
    """A serve row given as a server command line (any engine)."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The server's command line, with {port} (and {host}, {model}, {python}).")
    readiness: str = Field("auto", description="auto: /health or /v1/models answering 200; or one of them.")
    ready_timeout_s: float = Field(600.0, gt=0, description="Give up when not ready after this many seconds.")
    telemetry_interval_s: float = Field(1.0, ge=0, le=3600, allow_inf_nan=False,
                                        description="Sample /metrics this often (0: off).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of the server process.")

    @field_validator("readiness")
    @classmethod
    def _readiness(cls, value: str) -> str:
        if value not in READINESS:
            raise ValueError(f"'{value}' is not one of {', '.join(READINESS)}")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        from lmmbench.core.placeholders import server_command_check

        server_command_check(value, SERVER_FIELDS, "'vllm serve {model} --port {port}'")
        return value


def _config_model(command: str) -> type[BaseModel]:
    if command == "proxy":
        from lmmbench.serve.proxy.app import ProxyConfig

        return ProxyConfig
    if command == "testserver":
        from lmmbench.config.perf.testserver import TestServerConfig

        return TestServerConfig
    from lmmbench.serve.server import ServeConfig

    return ServeConfig


def is_command_line(row: PlanRow) -> bool:
    """True when a serve row runs a server command line rather than lmmbench's own server."""
    return row.kind == "serve" and str(row.options.get("command", "serve")) not in SERVER_COMMANDS


def with_upstream(row: PlanRow, urls: dict[str, str]) -> PlanRow:
    """A proxy row whose ``upstream`` names a serve row, with that row's URL in its place."""
    upstream = str(row.options.get("upstream", ""))
    if row.kind != "proxy" or upstream not in urls:
        return row
    return row.model_copy(update={"options": {**row.options, "upstream": urls[upstream]}})


def server_config(row: PlanRow) -> tuple[str, BaseModel]:
    """The server command of a serve row and its validated options (port 0 until it starts)."""
    if is_command_line(row):
        cfg: Any = validate_options(CommandServer, dict(row.options))
        check(cfg.command, command_fields(row, None))
        # every wait is bounded: a readiness wait past the limits table's duration_s is a typo, not a plan
        check_limit("duration_s", cfg.ready_timeout_s, "ready_timeout_s")
        return "command", cfg
    opts = dict(row.options)
    if row.kind == "proxy":
        if row.model is not None:
            raise UserError("model: a proxy row serves what its upstream serves; name the model on the serve row "
                            "(or on the perf / eval row)")
        return "proxy", validate_options(_config_model("proxy"), {"port": 0, **opts})
    command = str(opts.pop("command", "serve"))
    if row.model is not None:
        opts["model"] = row.model
    return command, validate_options(_config_model(command), {"port": 0, **opts})  # 0: chosen when it starts


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
    """A started serve row: its process (leader of its own process group), URL, log and telemetry."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    _log: IO[bytes]
    telemetry: Any = None

    def stop(self) -> dict[str, Any]:
        """Stop the telemetry, then SIGTERM the server's whole process group (an engine's workers too), SIGKILL
        after ``stop_grace_s``; closes the log. Returns what the serve row reports (telemetry, exit code)."""
        return stop_servers([self])[0]


def stop_servers(servers: list[RunningServer]) -> list[dict[str, Any]]:
    """Stop every server at once (``RunningServer.stop``): one grace period for all, not one after another."""
    from lmmbench.config.limits import limit_value

    out: list[dict[str, Any]] = []
    for srv in servers:
        if srv.telemetry is not None:
            srv.telemetry.stop()
            out.append({"telemetry_samples": srv.telemetry.rows, "telemetry_with_data": srv.telemetry.data_rows})
        else:
            out.append({})
    stop_groups([s.proc for s in servers], signal.SIGTERM, float(limit_value("stop_grace_s")))
    for srv, metrics in zip(servers, out, strict=True):
        srv._log.close()
        metrics["server_exit_code"] = srv.proc.returncode
    return out


def _ready_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return 0


def wait_for_command_server(base: str, readiness: str, timeout_s: float, alive: Callable[[], bool]) -> None:
    """Poll ``/health`` and / or ``/v1/models`` until one answers 200; ``UserError`` when the process exits or
    ``timeout_s`` passes (naming what the endpoints last answered)."""
    paths = ["/health", "/v1/models"] if readiness == "auto" else [readiness]
    deadline = time.monotonic() + timeout_s
    last: dict[str, int] = {}
    while True:
        for path in paths:
            last[path] = _ready_status(base + path)
            if last[path] == 200:
                return
        if not alive():
            raise UserError(f"the server for {base} exited before it was ready")
        if time.monotonic() >= deadline:
            said = ", ".join(f"{p}: {'no answer' if c == 0 else f'HTTP {c}'}" for p, c in last.items())
            raise UserError(f"{base}: not ready after {timeout_s:g} s ({said})")
        time.sleep(0.25)


def _log_tail(path: Path, n: int = 3) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line[:200] for line in lines[-n:])


def command_fields(row: PlanRow, port: int | None) -> Fields:
    """The fields of a serve row's command line: ``{port}`` (chosen when it starts), ``{host}``, ``{model}``
    (the row's ``model:``; unavailable without one), ``{python}`` (this interpreter)."""
    values = {"host": "127.0.0.1", "python": sys.executable}
    unavailable = {}
    if port is not None:
        values["port"] = str(port)
    if row.model is not None:
        values["model"] = row.model
    else:
        unavailable["model"] = "this row has no model:; give the row model: NAME"
    later = frozenset({"port"} if port is None else set())
    return Fields("options.command", values, later, unavailable)


def _argv(row: PlanRow, command: str, cfg: BaseModel, port: int) -> tuple[list[str], dict[str, str]]:
    if isinstance(cfg, CommandServer):
        return fill_argv(cfg.command, command_fields(row, port)), cfg.env
    update: dict[str, Any] = {"port": port}
    if "host" not in cfg.model_fields_set:  # a row's own host (e.g. 0.0.0.0) is kept; its URL stays on loopback
        update["host"] = "127.0.0.1"
    cfg = cfg.model_copy(update=update)
    cfg.model_fields_set.update(update)  # so the CLI flags carry them
    return [sys.executable, "-m", "lmmbench.cli.main", command, *_cli_args(cfg)], {}


def start_server(row: PlanRow, row_dir: Path, timeout_s: float = 300.0) -> RunningServer:
    """Start ``row``'s server on a free loopback port in its own process group, wait until it is ready,
    start sampling its ``/metrics``, return it. A server that does not come up is stopped and a
    ``UserError`` names why, with the last lines of its log."""
    from lmmbench.core.net import free_loopback_port

    command, cfg = server_config(row)
    port = int(getattr(cfg, "port", 0) or 0) or free_loopback_port()  # a row's own port: that one
    ensure_port_free("127.0.0.1", port, what="port: for this row")  # never wait on a server someone else runs
    argv, env = _argv(row, command, cfg, port)
    row_dir.mkdir(parents=True, exist_ok=True)
    log_path = row_dir / "server.log"
    log = log_path.open("wb")
    log.write(("$ " + shlex.join(argv) + "\n").encode())
    log.flush()
    try:
        proc = start_group(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    except OSError as exc:
        log.close()
        raise UserError(f"cannot start the server ({argv[0]}: {exc.strerror or exc})") from None
    (row_dir / "server.pid").write_text(str(proc.pid), encoding="utf-8")  # the leader of its process group
    server = RunningServer(row.name, proc, f"http://127.0.0.1:{port}/v1", log_path, log)
    try:
        if isinstance(cfg, CommandServer):
            wait_for_command_server(f"http://127.0.0.1:{port}", cfg.readiness, cfg.ready_timeout_s,
                                    alive=lambda: proc.poll() is None)  # fmt: skip
        else:
            wait_until_ready(server.url, timeout_s, alive=lambda: proc.poll() is None)
        other = foreign_listener(port, proc.pid)
        if other is not None:
            raise UserError(f"port {port} is answered by {other}, not by the server this row started")
    except UserError as exc:
        server.stop()
        raise UserError(f"{exc}; log {log_path}: {_log_tail(log_path)}") from None
    except BaseException:
        server.stop()
        raise
    interval = cfg.telemetry_interval_s if isinstance(cfg, CommandServer) else 0.0 if command == "proxy" else 1.0
    if interval > 0:
        from lmmbench.loadgen.telemetry import TelemetrySampler

        server.telemetry = TelemetrySampler(server.url, row_dir, interval).start()
    return server
