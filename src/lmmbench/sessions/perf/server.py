"""Servers of a perf run: ``--server-cmd`` started per group of points (one point each for a ByteMLPerf
workload, as its launcher does; else per ``tp``) and stopped after it, readiness waits,
and the sweep over the load points grouped that way. The server leads its own process group and dies with
perf (``core.children``); it is stopped as a group: SIGTERM, SIGKILL after the ``stop_grace_s`` limit."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from lmmbench.config.limits import limit_value
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.children import start_group, stop_groups
from lmmbench.core.errors import UserError
from lmmbench.core.net import ensure_port_free, foreign_listener
from lmmbench.core.placeholders import Fields, fill_argv
from lmmbench.loadgen.api import LoadResult, ModelNotServed, Preflight, preflight
from lmmbench.sessions.perf.points import point_config
from lmmbench.sessions.perf.resume import Previous

__all__ = ["check_server_cmd", "server_cmd_fields", "server_groups", "start_server", "stop_server", "sweep",
           "wait_ready"]


SERVER_CMD_FIELDS = ("port", "host", "model", "tp", "batch", "python")


def server_cmd_fields(base: PerfConfig, tp: Any, batch: Any) -> Fields:
    """The fields of ``--server-cmd`` for one server: ``{port}`` / ``{host}`` (the URL's), ``{model}``
    (``--model``), ``{tp}``, ``{batch}`` (the largest batch size, else concurrency, of its points), ``{python}``
    (this interpreter); each one this run has no value for is unavailable, with the reason."""
    parts = urlsplit(base.url)
    values = {"port": str(parts.port or 80), "host": parts.hostname or "127.0.0.1", "python": sys.executable}
    missing = {"model": "no --model given (the server's first model is used); give --model to fill {model}",
               "tp": "this run has no tp sizes (a ByteMLPerf workload's tp_sizes give them)",
               "batch": "these load points have no batch size or concurrency (--rates sends at rates); give "
                        "--batch-sizes or --concurrency, or drop {batch}"}
    for key, value in (("model", base.model), ("tp", tp), ("batch", batch)):
        if value is not None:
            values[key] = str(value)
            missing.pop(key)
    return Fields("--server-cmd", values, unavailable=missing)


def check_server_cmd(base: PerfConfig, points: list[dict[str, Any]]) -> None:
    """Refuse, before anything runs, a ``--server-cmd`` whose placeholders some server of this run cannot fill
    (``{batch}`` with ``--rates``, an unknown name) and a ``--url`` port another process already listens on."""
    if base.server_cmd is None:
        return
    for items in server_groups(base, points, per_point=False):
        tp = items[0][1].labels.get("tp")
        argv = fill_argv(base.server_cmd, server_cmd_fields(base, tp, _largest_batch(items)))
        executable = shutil.which(argv[0])
        if executable is None:
            raise UserError(f"--server-cmd: '{argv[0]}' is not a command here (not found on PATH)")
    parts = urlsplit(base.url)
    ensure_port_free(parts.hostname or "127.0.0.1", parts.port or 80, what="--url port")


def start_server(base: PerfConfig, tp: Any, batch: Any) -> subprocess.Popen[bytes]:
    """Start ``--server-cmd`` for one tp size (``server_cmd_fields``), each value one whole argument."""
    assert base.server_cmd is not None
    argv = fill_argv(base.server_cmd, server_cmd_fields(base, tp, batch))
    print(f"[perf] starting server: {shlex.join(argv)}", file=sys.stderr)
    try:
        return start_group(argv)
    except OSError as exc:
        raise UserError(f"--server-cmd: cannot start {argv[0]}: {exc.strerror or exc}") from None


def wait_ready(cfg: PerfConfig, proc: subprocess.Popen[bytes] | None, timeout_s: float = 300) -> Preflight:
    """The preflight of a server that is starting: asked again while the process lives, up to ``timeout_s``;
    a server that answers without serving ``--model`` fails at once (naming what it serves), a started server
    that exits fails at once with its exit code, and an answer from a process it did not start is refused."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise UserError(f"--server-cmd: the server exited with code {proc.returncode} before it was ready "
                            f"(its output is above)")
        try:
            pf = preflight(cfg)
        except ModelNotServed:
            raise
        except UserError:
            if proc is None or time.monotonic() > deadline:
                raise
            time.sleep(0.25)
            continue
        if proc is not None:
            port = urlsplit(cfg.url).port or 80
            other = foreign_listener(port, proc.pid)
            if other is not None:
                raise UserError(f"--server-cmd: port {port} is answered by {other}, not by the server perf "
                                f"started; stop it or choose another --url port")
        return pf


def _largest_batch(items: list[tuple[int, PerfConfig]]) -> Any:
    """ByteMLPerf's ``max_batch_size`` of a server: the largest batch (else concurrency) its points send."""
    sizes = [p.labels.get("batch", p.concurrency) for _i, p in items]
    known = [s for s in sizes if isinstance(s, int)]
    return max(known) if known else None


def server_groups(base: PerfConfig, points: list[dict[str, Any]], per_point: bool
                  ) -> list[list[tuple[int, PerfConfig]]]:  # fmt: skip
    """The points each started server measures, in order: one point each (``per_point``: ByteMLPerf's launcher,
    a fresh server per point), else grouped by ``tp`` label when ``--server-cmd`` starts servers, else one group."""
    groups: dict[Any, list[tuple[int, PerfConfig]]] = {}
    for i, point in enumerate(points):
        pcfg = point_config(base, point)
        key = i if per_point and base.server_cmd else (pcfg.labels.get("tp") if base.server_cmd else None)
        groups.setdefault(key, []).append((i, pcfg))
    return list(groups.values())


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a started server's whole process group: SIGTERM, then SIGKILL after the limits table's stop_grace_s."""
    stop_groups([proc], signal.SIGTERM, float(limit_value("stop_grace_s")))


def sweep(base: PerfConfig, points: list[dict[str, Any]], done: Previous | None,
          one: Callable[[int, PerfConfig, Preflight], LoadResult], pf: Preflight | None,
          per_point: bool = False) -> None:  # fmt: skip
    """Every load point in order, each group of ``server_groups`` on a server of its own when ``--server-cmd``
    starts them; points a resumed run already measured are skipped (and a group of only those starts nothing).
    An interrupted point raises KeyboardInterrupt."""
    for items in server_groups(base, points, per_point):
        todo = [(i, pcfg) for i, pcfg in items if done is None or i not in done.done]
        if not todo:
            continue  # measured by the session this --resume continues
        proc = None
        if base.server_cmd:
            proc = start_server(base, items[0][1].labels.get("tp"), _largest_batch(items))
        try:
            if proc is not None:
                pf = wait_ready(base, proc)
            if pf is None:
                raise UserError("perf: no server to send to (give --url, or --server-cmd to start one)")
            for i, pcfg in todo:
                if one(i, pcfg, pf).interrupted:
                    raise KeyboardInterrupt
        finally:
            if proc is not None:
                stop_server(proc)
