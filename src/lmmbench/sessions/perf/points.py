"""The load points of a perf run: the options (or ``--workload`` file) resolved into one config per point."""

from __future__ import annotations

from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.config.loaders import parse_model
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.workload_file import find_workload, load_workload
from lmmbench.core.errors import UserError

__all__ = ["WORKLOAD_OVERRIDES", "check_points", "is_bytemlperf_file", "point_config", "point_labels", "resolve_points"]


#: Options that replace a ByteMLPerf workload's per-point value (the override is written in each point's labels).
WORKLOAD_OVERRIDES = ("duration_s", "concurrency", "input_tokens", "output_tokens")
#: Options a ByteMLPerf workload's closed-loop batch points cannot honour.
_NOT_WITH_BYTEMLPERF = {"rates": "--rates", "concurrencies": "--concurrencies", "rate": "--rate",
                        "num_requests": "--num-requests"}  # fmt: skip


def _override(points: list[dict[str, Any]], explicit: dict[str, Any]) -> list[dict[str, Any]]:
    """A ByteMLPerf workload's points with the options of ``WORKLOAD_OVERRIDES`` given on the command line in
    place of the workload's values; each point says what was replaced (``labels.overridden``)."""
    out = []
    for wp in points:
        point, overridden = dict(wp), {}
        for key in WORKLOAD_OVERRIDES:
            if key in explicit and key in wp:
                if wp[key] != explicit[key]:
                    overridden[key] = {"workload": wp[key], "option": explicit[key]}
                point[key] = explicit[key]
        if overridden:
            point["labels"] = {**wp.get("labels", {}), "overridden": overridden}
        out.append(point)
    return out


def resolve_points(cfg: PerfConfig) -> tuple[PerfConfig, list[dict[str, Any]]]:
    """The base config (options over the workload file's) and every point's overrides (workload x sweep)."""
    explicit = cfg.model_dump(include=cfg.model_fields_set)
    wpoints: list[dict[str, Any]] = [{}]
    merged: dict[str, Any] = dict(explicit)
    if cfg.workload is not None:
        path = find_workload(cfg.workload, cfg.workloads_dir)
        explicit["workload"] = path
        base, wpoints = load_workload(path)
        if is_bytemlperf_file(base):
            given = [flag for key, flag in _NOT_WITH_BYTEMLPERF.items() if key in cfg.model_fields_set]
            if given:
                raise UserError(f"{given[0]}: a ByteMLPerf workload's points are closed-loop batches of its "
                                "batch_sizes for perf_time seconds; drop it (or --concurrency / --duration-s, "
                                "which replace every point's)")  # fmt: skip
            wpoints = _override(wpoints, explicit)
        labels = {**base.get("labels", {}), **explicit.get("labels", {})}
        merged = {**base, **explicit, "labels": labels}
    elif cfg.workloads_dir is not None:
        raise UserError("--workloads-dir: only a bare --workload NAME is looked up there; give --workload or drop it")
    base_cfg = parse_model(PerfConfig, merged, source=f"workload {cfg.workload}" if cfg.workload else "options")
    points = [{**wp, **cp} for wp in wpoints for cp in base_cfg.load_points()]
    return base_cfg, points


def is_bytemlperf_file(base: dict[str, Any]) -> bool:
    """Whether ``load_workload``'s base settings came from a ByteMLPerf workload (they carry its task label)."""
    return "workload" in base.get("labels", {})


def point_config(base: PerfConfig, point: dict[str, Any], source: str = "load point") -> PerfConfig:
    """The config of one load point: ``base`` with the point's overrides (a rate point drops the concurrency)."""
    data = base.model_dump()
    labels = {**data.get("labels", {}), **point.get("labels", {})}
    data.update({k: v for k, v in point.items() if k != "labels"})
    data.update(labels=labels, rates=[], concurrencies=[])
    if point.get("rate") is not None and "concurrency" not in point and not base.model_fields_set & {"concurrency"}:
        data["concurrency"] = None
    if point.get("concurrency") is not None and "rate" not in point:
        data["rate"] = None
    return parse_model(PerfConfig, data, source=source)


def check_points(base: PerfConfig, points: list[dict[str, Any]]) -> None:
    """Refuse too many points, or a negative or NaN value of any point, before the server is asked."""
    check_limit("sweep_points", len(points), "load points (workload points x sweep)")
    for i, point in enumerate(points):
        point_config(base, point, f"load point {i + 1}" + (f" of {base.workload}" if base.workload else ""))


def point_labels(i: int, pcfg: PerfConfig) -> dict[str, Any]:
    """The labels every record, row and entry of point ``i`` carries."""
    return {"point": i, "rate": pcfg.rate, "concurrency": pcfg.concurrency, "input_tokens": pcfg.input_tokens,
            "output_tokens": pcfg.output_tokens, **pcfg.labels}  # fmt: skip
