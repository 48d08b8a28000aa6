"""Plan files: one row per run (``run <spec>``, ``perf``, ``eval`` or a ``serve`` / ``proxy`` the others use).

A plan is YAML (``name``, ``out_dir``, ``executor``, ``rows: [...]``) or CSV after VLMHyperBench's
``user_config.csv`` with the columns ``name, kind, model, options, executor, requirements, image``
(optional ``python, num_cpus, num_gpus, needs, isolation, mounts``). In CSV, ``options`` is ``key=value;key=value``;
``requirements``, ``needs`` and ``mounts`` are ``;``-separated. A row runs after the rows it ``needs`` (see
``executors.stages``); a ``command`` row runs any command line in its environment. Two option keys
are lifted out of ``options``: ``spec`` (the spec a ``run`` row runs) and ``server`` (the ``serve`` or ``proxy``
row a ``perf`` or ``eval`` row talks to). A ``proxy`` row is ``lmmbench proxy`` in front of ``options.upstream``:
a URL, or the name of a serve row of the plan.
Every error names the file, the row and the field.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lmmbench.core.errors import UserError, user_error_from_validation

__all__ = ["CSV_COLUMNS", "Plan", "PlanRow", "check_url", "load_plan", "parse_options"]

CSV_COLUMNS = ("name", "kind", "model", "options", "executor", "requirements", "image")
_OPTIONAL_CSV_COLUMNS = ("python", "num_cpus", "num_gpus", "spec", "server", "needs", "isolation", "mounts")
RowKind = Literal["run", "perf", "eval", "serve", "command", "proxy"]
SERVER_KINDS = ("serve", "proxy")  # rows the plan starts in the background for the rows that name them
Isolation = Literal["isolated", "shared"]
MAX_CPUS = 65_536  # bounds of a row's numeric fields: a typo (.inf, 1e9) refused at validation, not in the executor
MAX_GPUS = 4_096
MAX_WORKERS = 4_096
MAX_RETRIES = 100
URL_SCHEMES = ("http", "https")


class PlanRow(BaseModel):
    """One run of a plan, with where and in what environment it runs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Unique row name (its folder's name).")
    kind: RowKind
    model: str | None = Field(None, description="Model name or directory (perf: the served model's name).")
    spec: str | None = Field(None, description="The spec a `run` row runs (e.g. ttft-breakdown).")
    server: str | None = Field(None, description="Name of the `serve` row a perf / eval row sends to.")
    options: dict[str, Any] = Field(default_factory=dict, description="The run's options, as on its command line.")
    executor: str | None = Field(None, description="Executor of this row (default: the plan's).")
    requirements: list[str] = Field(default_factory=list, description="Packages installed for the row.")
    image: str | None = Field(None, description="Container image (container executor; default: the self-contained "
                              "image of `lmmbench envs build-image` with the extras of the row's kind; lmmbench is "
                              "layered on an image that lacks it).")  # fmt: skip
    python: str | None = Field(None, description="Python version of the row's venv (default: the running one).")
    num_cpus: float = Field(1.0, ge=0, le=MAX_CPUS, allow_inf_nan=False,
                            description="CPUs the row needs (ray; CPU slots of the local pool).")
    num_gpus: float = Field(0.0, ge=0, le=MAX_GPUS, allow_inf_nan=False,
                            description="GPUs the row needs (ray; GPU slots of the local pool).")
    needs: list[str] = Field(default_factory=list, description="Rows that must succeed before this one starts.")
    isolation: Isolation | None = Field(None, description="venv executor: isolated (nothing of the driver's "
                                        "environment) or shared (the driver's packages visible); default: "
                                        "isolated for a row with requirements or python, else shared.")
    mounts: list[str] = Field(default_factory=list, description="container executor: host paths mounted into the "
                              "container, each HOST[:CONTAINER][:ro|:rw] (default: the same path, read-only).")

    @field_validator("options", mode="before")
    @classmethod
    def _options_text(cls, value: Any) -> Any:
        return parse_options(value) if isinstance(value, str) else value

    @field_validator("requirements")
    @classmethod
    def _package_specs(cls, value: list[str]) -> list[str]:
        for entry in value:
            option = next((w for w in entry.split() if w.startswith("-")), None)
            if option is not None:
                raise ValueError(f"'{entry}': '{option}' is an installer option; a requirement is a package spec "
                                 f"(name[extras] version, a URL or a path), and the row's installs stay in its "
                                 f"own environment")
        return value

    @field_validator("requirements", "needs", "mounts", mode="before")
    @classmethod
    def _requirements_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [p.strip() for p in value.replace("\n", ";").split(";") if p.strip()]
        return value


class Plan(BaseModel):
    """A plan: rows plus plan-wide defaults."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    out_dir: Path = Field(Path("lmmbench-plans"), description="Rows go to <out-dir>/<plan>/<row>/.")
    executor: str = Field("inprocess", description="Executor of rows that name none.")
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description="Local pool size (CPU slots; one per GPU when GPUs "
                         "exist).")
    max_retries: int = Field(2, ge=0, le=MAX_RETRIES, description="Re-runs of a row whose worker crashed or was "
                             "killed.")
    isolation: Isolation | None = Field(None, description="venv isolation of rows that name none (see rows).")
    rows: list[PlanRow]
    source: str | None = Field(None, exclude=True, description="The file the plan was read from (for errors).")


def _scalar(text: str) -> Any:
    """``20`` -> 20, ``true`` -> True, ``[1,2]`` -> [1, 2]; anything else stays text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_options(text: str) -> dict[str, Any]:
    """``key=value;key=value`` -> a dict (values read as JSON when they parse, else text)."""
    out: dict[str, Any] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"expected key=value, got '{part.strip()}'")
        key, value = part.split("=", 1)
        out[key.strip().replace("-", "_")] = _scalar(value.strip())
    return out


def _lift(raw: dict[str, Any]) -> dict[str, Any]:
    """Move ``spec`` / ``server`` from the options into the row's own fields."""
    row = {k: v for k, v in raw.items() if v not in (None, "")}
    opts = row.get("options")
    if isinstance(opts, str):
        try:
            opts = parse_options(opts)
        except ValueError as exc:
            raise UserError(f"options: {exc}") from None
    if isinstance(opts, dict):
        opts = dict(opts)
        for key in ("spec", "server"):
            if key in opts:
                row.setdefault(key, opts.pop(key))
        row["options"] = opts
    return row


def _row_error(path: Path, n: int, raw: dict[str, Any], exc: ValidationError | UserError) -> UserError:
    name = raw.get("name") or "?"
    if isinstance(exc, UserError):
        return UserError(f"{path}: row {n} '{name}': {exc}")
    return user_error_from_validation(exc, f"{path}: row {n} '{name}'", root="(row)")


def _read_rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if path.suffix.lower() == ".csv":
        from lmmbench.config.input_files import read_text

        with io.StringIO(read_text(path, "plan"), newline="") as fh:  # a BOM dropped; non-UTF-8 names the file
            reader = csv.DictReader(fh)
            header = [h.strip() for h in reader.fieldnames or []]
            unknown = [h for h in header if h not in (*CSV_COLUMNS, *_OPTIONAL_CSV_COLUMNS)]
            if unknown or "name" not in header or "kind" not in header:
                raise UserError(f"{path}: columns must be {', '.join(CSV_COLUMNS)} (optional: "
                                f"{', '.join(_OPTIONAL_CSV_COLUMNS)}); got {', '.join(header)}")
            rows = [{k.strip(): (v or "").strip() for k, v in r.items() if k} for r in reader]
        return {"name": path.stem.replace(" ", "-")}, rows
    from lmmbench.config.loaders import load_config_file

    data = load_config_file(path)
    rows = data.pop("rows", None)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UserError(f"{path}: 'rows' must be a list of mappings (name, kind, model, options, ...)")
    data.setdefault("name", path.stem.replace(" ", "-"))
    return data, rows


def load_plan(path: Path, overrides: dict[str, Any] | None = None) -> Plan:
    """Read and validate a YAML or CSV plan; ``overrides`` (from the command line) win over the file."""
    if not path.is_file():
        raise UserError(f"plan file not found: {path}")
    head, raw_rows = _read_rows(path)
    rows: list[PlanRow] = []
    for n, raw in enumerate(raw_rows, start=1):
        try:
            rows.append(PlanRow.model_validate(_lift(raw)))
        except (ValidationError, UserError) as exc:
            raise _row_error(path, n, raw, exc) from None
    if not rows:
        raise UserError(f"{path}: the plan has no rows")
    names = [r.name for r in rows]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"{path}: row names must be unique; repeated: {', '.join(dup)}")
    head.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        plan = Plan.model_validate({**head, "rows": rows, "source": str(path)})
    except ValidationError as exc:
        raise user_error_from_validation(exc, str(path)) from None
    _check_links(path, plan)
    return plan


def _check_links(path: Path, plan: Plan) -> None:
    kinds = {r.name: r.kind for r in plan.rows}
    for n, row in enumerate(plan.rows, start=1):
        where = f"{path}: row {n} '{row.name}'"
        if row.kind == "run" and not row.spec:
            raise UserError(f"{where}: spec: a run row needs spec=<name> in its options (see `lmmbench specs`)")
        if row.server is not None:
            if row.kind not in ("perf", "eval"):
                raise UserError(f"{where}: server: only perf and eval rows send to a serve row")
            if kinds.get(row.server) not in SERVER_KINDS:
                raise UserError(f"{where}: server: '{row.server}' is not the name of a serve or proxy row of this "
                                f"plan")
        if row.kind == "proxy":
            _check_upstream(where, row.options.get("upstream"), kinds)
        if row.kind == "perf" and row.server is None and "url" not in row.options:
            raise UserError(f"{where}: options: a perf row needs server=<serve row> or url=<server URL>")
        if row.kind == "perf" and isinstance(row.options.get("url"), str):
            check_url(f"{where}: options.url", row.options["url"])


def _check_upstream(where: str, upstream: Any, kinds: Mapping[str, str]) -> None:
    """A proxy row's ``upstream``: a URL, or the name of a serve row of the plan."""
    if not isinstance(upstream, str) or not upstream:
        raise UserError(f"{where}: options.upstream: a proxy row needs upstream=<serve row> or upstream=<server URL>")
    if "://" not in upstream and kinds.get(upstream) != "serve":
        raise UserError(f"{where}: options.upstream: '{upstream}' is neither a URL nor the name of a serve row of "
                        f"this plan")
    if "://" in upstream:
        check_url(f"{where}: options.upstream", upstream)


def check_url(where: str, url: str) -> None:
    """Refuse a server URL that is not ``http(s)://host[:port]...`` (``ftp://``, no host, a port out of range)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UserError(f"{where}: '{url}' is not a URL ({exc})") from None
    if parts.scheme not in URL_SCHEMES or not parts.hostname:
        raise UserError(f"{where}: '{url}' must be an http:// or https:// URL with a host (a server lmmbench "
                        f"sends to), e.g. http://127.0.0.1:8000")
    del port
