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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lmmbench.core.children import start_group, stop_groups
from lmmbench.core.errors import UserError
from lmmbench.core.placeholders import Fields, check, fill_argv, fill_shell, fill_text, names_in, shell_syntax

if TYPE_CHECKING:
    from lmmbench.executors.plan import Plan

__all__ = ["CommandRowConfig", "check_command_line", "check_needs", "command_fields", "fill_handoff", "handoff_fields",
           "run_command_row"]

_REF = re.compile(r"\{rows\.([A-Za-z0-9][A-Za-z0-9_.-]*?)\.(out_dir|folder)\}")


class CommandRowConfig(BaseModel):
    """A ``command`` row's options: the command line, its declared outputs, extra environment."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(description="The command line ({out_dir}: the row's folder; {python}: its interpreter; "
                         "{model}: the row's model; {rows.NAME.out_dir} / {rows.NAME.folder}: a needed row's).")
    shell: bool = Field(False, description="Run the line under /bin/sh -c (pipes, redirections, $VAR), each filled "
                        "value quoted; without it the line is split into arguments and shell syntax is refused.")
    outputs: list[str] = Field(default_factory=list, description="Paths under the row's folder the command must "
                               "write; the row fails when one is missing.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment of the command.")
    timeout_s: float | None = Field(None, gt=0, allow_inf_nan=False, description="Fail the row when the command "
                                    "runs longer.")
    out_dir: Path = Field(Path("."), description="The row's folder (set by the plan).")
    handoff: dict[str, str] = Field(default_factory=dict, description="The values of {model} and {rows.NAME.*} "
                                    "(set by the plan).")

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command line: {exc}") from None
        if not words:
            raise ValueError("an empty command line")
        return value

    @field_validator("timeout_s")
    @classmethod
    def _timeout(cls, value: float | None) -> float | None:
        from lmmbench.config.limits import check_limit

        try:
            check_limit("duration_s", value, "timeout_s")
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _no_shell(self) -> CommandRowConfig:
        found = None if self.shell else shell_syntax(self.command)
        if found is not None:
            raise ValueError(f"command: '{found}' is shell syntax, and a command row runs without a shell (its "
                             f"line split into arguments); add shell: true to run it under /bin/sh, or quote it "
                             f"to pass it as an argument")
        return self

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


def handoff_fields(where: str, needs: list[str], plan_dir: Path, folders: dict[str, str | None] | None) -> Fields:
    """The hand-off fields of a row that needs ``needs``: ``{rows.NAME.out_dir}`` (known before NAME runs) and
    ``{rows.NAME.folder}`` (known once NAME ended: from ``folders``; without them, the plan being validated,
    a name filled later)."""
    values = {f"rows.{n}.out_dir": str(plan_dir / n) for n in needs}
    later: set[str] = set()
    for n in needs:
        if folders is None:
            later.add(f"rows.{n}.folder")
        else:
            values[f"rows.{n}.folder"] = folders.get(n) or str(plan_dir / n)
    return Fields(where, values, frozenset(later))


def fill_handoff(options: dict[str, Any], fields: Fields, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``options`` with ``{rows.NAME.out_dir}`` / ``{rows.NAME.folder}`` filled in from ``fields``
    (``handoff_fields``); other braces are the options' own text. A ``{rows....}`` name that is not a field
    (``{rows.infer.outdir}``) is refused; one known only later stays as written. ``skip``: keys left as they
    are (a command row's line, filled when it runs)."""

    def fill(value: Any, key: str) -> Any:
        if isinstance(value, str):
            names = [n for n in names_in(value) if n.startswith("rows.")]
            if not names:
                return value
            where = Fields(f"{fields.where}.{key}", fields.values, fields.later, fields.unavailable)
            check(value, where, "rows.")
            return value if any(n in fields.later for n in names) else fill_text(value, where, "rows.")
        if isinstance(value, dict):
            return {k: fill(v, f"{key}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v, key) for v in value]
        return value

    return {k: (v if k in skip else fill(v, k)) for k, v in options.items()}


def command_fields(cfg: CommandRowConfig, out_dir: Path, python: str) -> Fields:
    """The fields of a command row's line where it runs: ``{out_dir}``, ``{python}``, and the plan's hand-off
    (``{model}``, ``{rows.NAME.out_dir}``, ``{rows.NAME.folder}``)."""
    unavailable = {} if "model" in cfg.handoff else {"model": "this row has no model:; give the row model: NAME"}
    return Fields("options.command", {"out_dir": str(out_dir), "python": python, **cfg.handoff},
                  unavailable=unavailable)  # fmt: skip


def check_command_line(cfg: CommandRowConfig, later: frozenset[str]) -> None:
    """Refuse, before anything runs, a placeholder of the command line that is no field of a command row
    (``{outdir}``, ``{rows.infer.outdir}``) or not available to this one (``{model}`` without ``model:``)."""
    fields = command_fields(cfg, Path("."), "")
    check(cfg.command, Fields(fields.where, cfg.handoff, later | {"out_dir", "python"}, fields.unavailable))


def _command_argv(cfg: CommandRowConfig, out_dir: Path) -> list[str]:
    fields = command_fields(cfg, out_dir, sys.executable)
    if cfg.shell:
        return ["/bin/sh", "-c", fill_shell(cfg.command, fields)]
    return fill_argv(cfg.command, fields)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float | None) -> int:
    """The command's exit code; past ``timeout_s``, or stopped by a signal, its whole process group is stopped
    (its children too) before this returns or raises."""
    from lmmbench.config.limits import limit_value

    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the command ran past timeout_s {timeout_s:g}") from None
    finally:  # also after a clean exit: what it left running in its group ends with the row
        stop_groups([proc], grace_s=float(limit_value("stop_grace_s")))


def run_command_row(cfg: CommandRowConfig) -> tuple[str, dict[str, Any]]:
    """Run a command row in this process's environment, the leader of its own process group (which ends with
    the row: at its end, at ``timeout_s``, at a stop); returns (its folder, metrics). Raises on a non-zero exit
    (with the log's tail) or a missing declared output."""
    out_dir = Path(cfg.out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = _command_argv(cfg, out_dir)
    env = {**os.environ, **cfg.env}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    log_path = out_dir / "command.log"
    t0 = time.perf_counter_ns()
    with log_path.open("wb") as log:
        log.write(("$ " + shlex.join(argv) + "\n").encode())
        log.flush()
        try:
            proc = start_group(argv, stdout=log, stderr=subprocess.STDOUT, cwd=out_dir, env=env)
        except FileNotFoundError as exc:
            raise RuntimeError(f"cannot start the command ({exc.filename}: not found)") from None
        code = _wait(proc, cfg.timeout_s)
    seconds = (time.perf_counter_ns() - t0) / 1e9
    if code != 0:
        tail = " | ".join(log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:])
        raise RuntimeError(f"the command exited with code {code}; log {log_path}: {tail}")
    missing = [o for o in cfg.outputs if not (out_dir / o).exists()]
    if missing:
        raise RuntimeError(f"the command did not write its declared output(s): {', '.join(missing)}")
    return str(out_dir), {"exit_code": code, "outputs": len(cfg.outputs), "command_s": seconds}
