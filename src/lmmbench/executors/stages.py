"""Stages: rows that need other rows, the hand-off of their outputs, and ``command`` rows.

As VLMHyperBench's workflow lays an evaluation out (an optional training stage, inference in one
environment, scoring in another, then a report), a plan row may name the rows it ``needs``. It starts
once they all succeeded; when one of them failed (or was skipped) it is skipped, its status naming
that row. Rows with no ``needs`` all start at once, as before.

The hand-off: in a row's ``options``, ``{rows.NAME.out_dir}`` is the folder of row ``NAME`` (known
before it runs: ``<out_dir>/<plan>/NAME``) and ``{rows.NAME.folder}`` is the run folder that row
reported when it ended (an eval row's ``<timestamp>`` folder, a perf row's run folder, a command
row's own folder). ``NAME`` must be one of the row's ``needs``. So an ``eval --mode eval`` row scores
the predictions of an ``eval --mode infer`` row with ``resume: "{rows.infer.folder}"``.

A ``command`` row runs any command line in its row's environment (the venv's interpreter first on
``PATH``, the container's, the driver's), in its own folder, with ``{out_dir}`` (that folder) and
``{python}`` (the environment's interpreter) filled in; the row fails when the command exits non-zero
or when one of its declared ``outputs`` (paths under its folder) is missing afterwards.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lmmbench.core.errors import UserError

if TYPE_CHECKING:
    from lmmbench.executors.plan import Plan

__all__ = ["CommandRowConfig", "check_needs", "fill_handoff", "run_command_row"]

_REF = re.compile(r"\{rows\.([A-Za-z0-9][A-Za-z0-9_.-]*?)\.(out_dir|folder)\}")


class CommandRowConfig(BaseModel):
    """A ``command`` row's options: the command line, its declared outputs, extra environment."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The command line ({out_dir}: the row's folder; {python}: its interpreter).")
    outputs: list[str] = Field(default_factory=list, description="Paths under the row's folder the command must "
                               "write; the row fails when one is missing.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of the command.")
    timeout_s: float | None = Field(None, gt=0, description="Fail the row when the command runs longer.")
    out_dir: Path = Field(Path("."), description="The row's folder (set by the plan).")

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        try:
            if not shlex.split(value):
                raise ValueError("an empty command line")
        except ValueError as exc:
            raise ValueError(f"cannot split the command line: {exc}") from None
        return value

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, value: list[str]) -> list[str]:
        for out in value:
            if Path(out).is_absolute() or ".." in Path(out).parts:
                raise ValueError(f"'{out}': an output is a path under the row's folder")
        return value


def _refs(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(m.group(1), m.group(2)) for m in _REF.finditer(value)]
    if isinstance(value, dict):
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def check_needs(source: str, plan: Plan) -> None:
    """Refuse, before anything runs: a ``needs`` naming no row of the plan (or a serve row, or itself), a
    hand-off reference to a row that is not among the row's ``needs``, and a cycle."""
    kinds = {r.name: r.kind for r in plan.rows}
    for n, row in enumerate(plan.rows, start=1):
        where = f"{source}: row {n} '{row.name}'"
        for need in row.needs:
            if need not in kinds:
                raise UserError(f"{where}: needs: '{need}' is not the name of a row of this plan")
            if need == row.name:
                raise UserError(f"{where}: needs: a row cannot need itself")
            if kinds[need] in ("serve", "proxy"):
                raise UserError(f"{where}: needs: '{need}' is a {kinds[need]} row; name it with server=<row> "
                                f"instead")
        for name, _ in _refs(row.options):
            if name not in row.needs:
                raise UserError(f"{where}: options: {{rows.{name}...}} reads row '{name}', which is not among "
                                f"this row's needs; add needs: [{name}]")
    cycle = _find_cycle({r.name: r.needs for r in plan.rows})
    if cycle:
        raise UserError(f"{source}: needs: the rows {' -> '.join(cycle)} need each other in a cycle")


def _find_cycle(graph: dict[str, list[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if state.get(nxt) is None and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in graph:
        if state.get(node) is None and (found := visit(node)):
            return found
    return []


def fill_handoff(options: dict[str, Any], plan_dir: Path, folders: dict[str, str | None] | None) -> dict[str, Any]:
    """``options`` with ``{rows.NAME.out_dir}`` / ``{rows.NAME.folder}`` filled in (``folders``: the run folder each
    ended row reported). Without ``folders`` (the plan being validated before anything ran)
    ``{rows.NAME.folder}`` stays as written (it is known once NAME ended)."""

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return _REF.sub(lambda m: _one(m.group(1), m.group(2)), value)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    def _one(name: str, what: str) -> str:
        out_dir = str(plan_dir / name)
        if what == "out_dir":
            return out_dir
        if folders is None:
            return f"{{rows.{name}.folder}}"
        return folders.get(name) or out_dir

    return {k: fill(v) for k, v in options.items()}


def run_command_row(cfg: CommandRowConfig) -> tuple[str, dict[str, Any]]:
    """Run a command row in this process's environment; returns (its folder, metrics). Raises on a non-zero
    exit (with the log's tail) or a missing declared output."""
    out_dir = Path(cfg.out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    line = cfg.command.replace("{out_dir}", shlex.quote(str(out_dir))).replace("{python}",
                                                                                shlex.quote(sys.executable))
    env = {**os.environ, **cfg.env}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    log_path = out_dir / "command.log"
    t0 = time.perf_counter_ns()
    with log_path.open("wb") as log:
        log.write(("$ " + line + "\n").encode())
        log.flush()
        try:
            code = subprocess.run(shlex.split(line), stdout=log, stderr=subprocess.STDOUT, cwd=out_dir, env=env,
                                  timeout=cfg.timeout_s, check=False).returncode  # fmt: skip
        except FileNotFoundError as exc:
            raise RuntimeError(f"cannot start the command ({exc.filename}: not found)") from None
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the command ran past timeout_s {cfg.timeout_s:g}") from None
    seconds = (time.perf_counter_ns() - t0) / 1e9
    if code != 0:
        tail = " | ".join(log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:])
        raise RuntimeError(f"the command exited with code {code}; log {log_path}: {tail}")
    missing = [o for o in cfg.outputs if not (out_dir / o).exists()]
    if missing:
        raise RuntimeError(f"the command did not write its declared output(s): {', '.join(missing)}")
    return str(out_dir), {"exit_code": code, "outputs": len(cfg.outputs), "command_s": seconds}
