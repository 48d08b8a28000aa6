"""Row fields honoured or refused: a plan row's field that its executor cannot honour is refused when the
plan is validated (before anything runs), naming the row and the field, never carried and dropped.

- ``requirements`` are installed by the executors that build an environment: ``venv`` (its venv),
  ``container`` (inside the container) and ``ray`` (the task's ``runtime_env``). ``inprocess`` and
  ``subprocess`` run the driver's own environment and install nothing: a row there that declares
  requirements is refused.
- ``python`` is chosen by the ``venv`` executor (a container's image decides its own).
- ``image`` is the ``container`` executor's; ``spec`` is a ``run`` row's.
- ``isolation`` is the ``venv`` executor's (see ``executors.venvs``).
- ``mounts`` are the ``container`` executor's (every other one sees the host's files as they are); each is
  checked here (a missing host path, a bad mode: refused before anything runs).
- A ``serve`` row is started by the plan beside the rows, with the driver's interpreter: it has no
  executor, environment or resource request of its own, so those fields are refused on it.
"""

from __future__ import annotations

import sys

from lmmbench.core.errors import UserError
from lmmbench.executors.plan import PlanRow

__all__ = ["INSTALLING_EXECUTORS", "check_row_fields"]

INSTALLING_EXECUTORS = ("venv", "container", "ray")
_DRIVER_EXECUTORS = ("inprocess", "subprocess")  # the driver's own environment
_REACHABLE_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0")


def check_row_fields(row: PlanRow, executor: str) -> None:
    """Refuse (``UserError``, one line naming the field) a field of ``row`` that ``executor`` cannot honour.
    Third-party executors are trusted with every field."""
    if row.kind in ("serve", "proxy"):
        _check_serve_row(row)
        return
    if row.spec is not None and row.kind != "run":
        raise UserError(f"spec: only a run row runs a spec; this is a {row.kind} row")
    if row.requirements and executor in _DRIVER_EXECUTORS:
        raise UserError(f"requirements: the '{executor}' executor runs the driver's own environment and installs "
                        f"nothing ({', '.join(row.requirements)} would never be installed); run the row on "
                        f"executor: venv (or container, ray), or install them into the driver's environment")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if row.python is not None and row.python != here and executor not in ("venv", "container"):
        raise UserError(f"python: '{row.python}' is chosen by the venv executor (the container's image decides "
                        f"its own); this row runs on '{executor}', i.e. on Python {here}: add executor: venv")
    if row.image is not None and executor != "container" and executor in (*_DRIVER_EXECUTORS, "venv", "ray"):
        raise UserError(f"image: only the container executor runs an image; this row runs on '{executor}'")
    if row.mounts:
        _check_mounts(row, executor)
    if row.isolation is not None and executor != "venv" and executor in (*_DRIVER_EXECUTORS, "container", "ray"):
        raise UserError(f"isolation: chooses how the venv executor builds a row's venv; this row runs on "
                        f"'{executor}'")


def _check_mounts(row: PlanRow, executor: str) -> None:
    if executor in (*_DRIVER_EXECUTORS, "venv", "ray"):
        raise UserError(f"mounts: only the container executor mounts host paths (this row runs on '{executor}', "
                        "which sees the host's files as they are); drop mounts or add executor: container")
    if executor == "container":
        from lmmbench.executors.container_mounts import check_mounts

        check_mounts(row.mounts)


def _check_serve_row(row: PlanRow) -> None:
    given = {"executor": row.executor is not None, "requirements": bool(row.requirements),
             "image": row.image is not None, "python": row.python is not None, "num_cpus": row.num_cpus != 1.0,
             "num_gpus": row.num_gpus != 0.0, "isolation": row.isolation is not None,
             "needs": bool(row.needs), "spec": row.spec is not None, "mounts": bool(row.mounts)}  # fmt: skip
    host = row.options.get("host")
    if host is not None and str(host) not in _REACHABLE_HOSTS:
        raise UserError(f"options.host: '{host}': the plan's rows reach a serve row on 127.0.0.1; bind "
                        f"{', '.join(_REACHABLE_HOSTS)}")
    bad = [k for k, v in given.items() if v]
    if bad:
        raise UserError(f"{bad[0]}: a serve row is started by the plan beside its rows, with the driver's "
                        f"interpreter and environment; give its server command line what it needs instead "
                        f"(options.command, options.env)")
