"""Workload files of ``lmmbench perf --workload``: lmmbench YAML, or a ByteMLPerf workload JSON as it is.

lmmbench YAML: any ``PerfConfig`` field at the top level, plus ``points``: a list of overrides,
one load point each (e.g. ``{concurrency: 8, input_tokens: 512}`` or ``{rate: 100}``).

ByteMLPerf JSON (``model``, ``min_new_tokens``, ``max_new_tokens``, ``tp_sizes``, ``batch_sizes``,
``input_tokens``, ``perf_time``, ``dataset``, ``test_perf``, ``test_accuracy``): every (tp, batch,
input_tokens) combination is a point that runs ``perf_time`` seconds with ``batch`` concurrent clients
(none when ``test_perf`` is false). ``--server-cmd`` starts a server per tp size with ``{batch}`` the
largest batch size of the run (ByteMLPerf's ``max_batch_size``); ``bytemlperf_flags`` gives the keys
that decide what else runs (the accuracy check, report.json's Min / Max New Tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.config.loaders import load_config_file
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError

__all__ = ["ByteMLPerfFlags", "bytemlperf_flags", "is_bytemlperf_workload", "load_workload"]

_BYTEMLPERF_KEYS = {"tp_sizes", "batch_sizes", "input_tokens", "perf_time"}


@dataclass(frozen=True)
class ByteMLPerfFlags:
    """The keys of a ByteMLPerf workload that decide what a run does beside its load points."""

    model: str | None
    test_perf: bool
    test_accuracy: bool
    min_new_tokens: int | None
    max_new_tokens: int | None
    dataset: str | None


def _flag(path: Path, data: dict[str, Any], key: str, default: bool) -> bool:
    v = data.get(key, default)
    if not isinstance(v, bool):
        raise UserError(f"{path}: '{key}' must be true or false")
    return v


def _positive(path: Path, data: dict[str, Any], key: str) -> int | None:
    v = data.get(key)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
        raise UserError(f"{path}: '{key}' must be a positive integer")
    return v


def bytemlperf_flags(path: Path) -> ByteMLPerfFlags | None:
    """The flags of the ByteMLPerf workload at ``path`` (as ByteMLPerf reads them); None for lmmbench YAML."""
    data = load_config_file(path)
    if not is_bytemlperf_workload(data):
        return None
    dataset = data.get("dataset")
    if dataset is not None and not isinstance(dataset, str):
        raise UserError(f"{path}: 'dataset' must be a path to a CSV of prompts")
    model = data.get("model")
    return ByteMLPerfFlags(model=str(model) if model is not None else None,
                           test_perf=_flag(path, data, "test_perf", True),
                           test_accuracy=_flag(path, data, "test_accuracy", False),
                           min_new_tokens=_positive(path, data, "min_new_tokens"),
                           max_new_tokens=_positive(path, data, "max_new_tokens"), dataset=dataset)  # fmt: skip


def is_bytemlperf_workload(data: dict[str, Any]) -> bool:
    """True for a ByteMLPerf workload mapping."""
    return set(data) >= _BYTEMLPERF_KEYS and isinstance(data.get("batch_sizes"), list)


def _int_list(path: Path, data: dict[str, Any], key: str) -> list[int]:
    v = data.get(key)
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and x > 0 for x in v):
        raise UserError(f"{path}: '{key}' must be a non-empty list of positive integers")
    return list(v)


def _from_bytemlperf(path: Path, data: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    tps = _int_list(path, data, "tp_sizes")
    batches = _int_list(path, data, "batch_sizes")
    inputs = _int_list(path, data, "input_tokens")
    perf_time = data.get("perf_time")
    if not isinstance(perf_time, (int, float)) or not perf_time > 0 or perf_time == float("inf"):
        raise UserError(f"{path}: 'perf_time' must be a positive number of seconds")
    check_limit("duration_s", perf_time, f"{path}: perf_time")
    base: dict[str, Any] = {"labels": {"workload": path.stem, "workload_model": data.get("model")}}
    if not _flag(path, data, "test_perf", True):
        return base, []  # ByteMLPerf's test_perf: false: no load point at all
    min_new, max_new = _positive(path, data, "min_new_tokens"), _positive(path, data, "max_new_tokens")
    if min_new is not None and max_new is not None and min_new > max_new:
        raise UserError(f"{path}: 'min_new_tokens' ({min_new}) is above 'max_new_tokens' ({max_new})")
    if max_new is not None:
        base["output_tokens"] = max_new
    if min_new is not None and min_new != max_new:  # between min and max: the server's EOS decides
        base["extra_body"] = {"min_tokens": min_new}
        base["ignore_eos"] = False
    check_limit("sweep_points", len(tps) * len(batches) * len(inputs), f"{path}: tp_sizes x batch_sizes x input_tokens")
    for key, values in (("batch_size", batches), ("input_tokens", inputs)):
        check_limit(key, max(values), f"{path}: {key if key != 'batch_size' else 'batch_sizes'}")
    points = []
    for tp in tps:
        for bs in batches:
            for it in inputs:
                points.append({
                    "concurrency": bs, "input_tokens": it, "duration_s": float(perf_time), "num_requests": None,
                    "labels": {"tp": tp, "batch": bs},
                })  # fmt: skip
    return base, points


def load_workload(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(base settings, points) of a workload file; each point is a dict of ``PerfConfig`` overrides."""
    data = load_config_file(path)
    if is_bytemlperf_workload(data):
        return _from_bytemlperf(path, data)
    points = data.pop("points", None)
    if points is None:
        points = [{}]
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        raise UserError(f"{path}: 'points' must be a list of mappings")
    check_limit("sweep_points", len(points), f"{path}: points")
    fields = set(PerfConfig.model_fields)
    for where, mapping in [("top level", data)] + [(f"points[{i}]", p) for i, p in enumerate(points)]:
        unknown = set(mapping) - fields
        if unknown:
            raise UserError(f"{path}: {where}: unknown field(s) {sorted(unknown)}")
    return data, points
