"""Servers of a perf run: ``--server-cmd`` started per group of points (one point each for a ByteMLPerf
workload, as its launcher does; else per ``tp``) and stopped after it, readiness waits,
and the sweep over the load points grouped that way. The server leads its own process group and dies with
perf (``core.children``); it is stopped as a group: SIGTERM, SIGKILL after the ``stop_grace_s`` limit."""

from __future__ import annotations

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
from lmmbench.core.placeholders import Fields, fill_argv
from lmmbench.loadgen.api import LoadResult, ModelNotServed, Preflight, preflight
from lmmbench.sessions.perf.points import point_config
from lmmbench.sessions.perf.resume import Previous

__all__ = ["fill_server_cmd", "server_groups", "start_server", "stop_server", "sweep", "wait_ready"]


def fill_server_cmd(cmd: str, tp: Any, batch: Any, port: int) -> list[str]:
    """The argv of ``--server-cmd`` with its ``{tp}``, ``{batch}`` and ``{port}`` filled in through the one
    placeholder formatter (``core.placeholders``: each value one whole argument, JSON braces left alone, an
    unknown or unavailable field refused naming the fields there are)."""
    values = {"port": str(port)}
    missing = {}
    for key, value in (("tp", tp), ("batch", batch)):
        if value is None:
            missing[key] = f"these load points have no {key} (a ByteMLPerf workload's tp_sizes / batch_sizes give it)"
        else:
            values[key] = str(value)
    return fill_argv(cmd, Fields("--server-cmd", values, unavailable=missing))


def start_server(cmd: str, tp: Any, batch: Any, url: str) -> subprocess.Popen[bytes]:
    """Start ``--server-cmd`` with its ``{tp}``, ``{batch}`` and ``{port}`` (the URL's) filled in."""
    argv = fill_server_cmd(cmd, tp, batch, urlsplit(url).port or 80)
    print(f"[perf] starting server: {' '.join(argv)}", file=sys.stderr)
    return start_group(argv)


def wait_ready(cfg: PerfConfig, proc: subprocess.Popen[bytes] | None, timeout_s: float = 300) -> Preflight:
    """The preflight of a server that is starting: asked again while the process lives, up to ``timeout_s``;
    a server that answers without serving ``--model`` fails at once (naming what it serves)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return preflight(cfg)
        except ModelNotServed:
            raise
        except UserError:
            if proc is None or time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.25)


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
            proc = start_server(base.server_cmd, items[0][1].labels.get("tp"), _largest_batch(items), base.url)
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
