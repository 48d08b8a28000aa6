"""The load points of a perf run: the options (or ``--workload`` file) resolved into one config per point."""

from __future__ import annotations

from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.config.loaders import parse_model
from lmmbench.config.perf.options import PerfConfig
from lmmbench.config.perf.workload_file import load_workload

__all__ = ["check_points", "point_config", "point_labels", "resolve_points"]


def resolve_points(cfg: PerfConfig) -> tuple[PerfConfig, list[dict[str, Any]]]:
    """The base config (options over the workload file's) and every point's overrides (workload x sweep)."""
    explicit = cfg.model_dump(include=cfg.model_fields_set)
    wpoints: list[dict[str, Any]] = [{}]
    merged: dict[str, Any] = dict(explicit)
    if cfg.workload is not None:
        base, wpoints = load_workload(cfg.workload)
        labels = {**base.get("labels", {}), **explicit.get("labels", {})}
        merged = {**base, **explicit, "labels": labels}
    base_cfg = parse_model(PerfConfig, merged, source=f"workload {cfg.workload}" if cfg.workload else "options")
    points = [{**wp, **cp} for wp in wpoints for cp in base_cfg.load_points()]
    return base_cfg, points


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
