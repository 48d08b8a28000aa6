"""lm-evaluation-harness group files, ``--include-path`` folders, and group aggregation.

A group file has ``group: <name>`` and ``task:`` (a list of task names, group names, tags or inline
task mappings) and optionally ``aggregate_metric_list`` (``metric``, ``aggregation: mean``,
``weight_by_size``, ``filter_list``). A name is looked up in an index of every YAML file under the
``--include-path`` folders and the group file's own folder (``task:``, ``group:`` and ``tag:`` names),
as lm-eval's ``TaskManager`` does. A group's value is lm-eval's: the mean of its members' values,
weighted by their sample counts when ``weight_by_size`` (default), and the pooled standard error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.evaluation.evaluate import TaskResult
from lmmbench.evaluation.lmeval.tasks import (
    is_lmeval_mapping,
    read_lmeval_yaml,
    resolve_includes,
    task_from_lmeval,
)
from lmmbench.evaluation.task_config import TaskConfig
from lmmbench.metrics.accuracy import MetricValue

__all__ = [
    "GroupAggregate",
    "LmEvalGroup",
    "LmEvalIndex",
    "TaskSelection",
    "group_results",
    "load_by_name",
    "load_lmeval_file",
]

_GROUP_KEYS = {"group", "group_alias", "task", "aggregate_metric_list", "metadata"}


@dataclass
class GroupAggregate:
    """One ``aggregate_metric_list`` entry (``filter`` None: every filter its tasks report)."""

    metric: str
    weight_by_size: bool = True
    filter: str | None = None


def _key(metric: str, filter_name: str) -> str:
    """A metric's name in a task result: ``metric`` (filter "none") or ``metric,filter``."""
    return metric if filter_name == "none" else f"{metric},{filter_name}"


@dataclass
class LmEvalGroup:
    """A group: its members (task or group names, in order) and how they aggregate."""

    name: str
    members: list[str]
    aggregates: list[GroupAggregate]
    version: Any = 1


@dataclass
class TaskSelection:
    """What ``--tasks`` asked for: the tasks to run, and the groups over them (innermost first)."""

    tasks: list[TaskConfig] = field(default_factory=list)
    groups: list[LmEvalGroup] = field(default_factory=list)

    def add(self, other: TaskSelection) -> None:
        """Append ``other``'s tasks and groups, each name once."""
        have = {t.task for t in self.tasks}
        self.tasks += [t for t in other.tasks if t.task not in have]
        names = {g.name for g in self.groups}
        self.groups += [g for g in other.groups if g.name not in names]


class LmEvalIndex:
    """Names of the lm-eval task, group and tag files under some folders."""

    def __init__(self, folders: Sequence[Path]) -> None:
        self.files: dict[str, Path] = {}
        self.tags: dict[str, list[str]] = {}
        for folder in folders:
            if not folder.is_dir():
                raise UserError(f"--include-path: {folder} is not a folder")
            for path in sorted([*folder.rglob("*.yaml"), *folder.rglob("*.yml")]):
                self._add(path)

    def _add(self, path: Path) -> None:
        try:
            data = resolve_includes(path, read_lmeval_yaml(path))
        except (UserError, OSError, UnicodeDecodeError):
            return  # an unreadable file is reported when it is asked for, not when it is indexed
        if not is_lmeval_mapping(data):
            return
        name = data.get("group") if isinstance(data.get("task"), list) else data.get("task")
        if isinstance(name, str):
            self.files.setdefault(name, path)
            tags = data.get("tag") or []
            for tag in [tags] if isinstance(tags, str) else tags:
                self.tags.setdefault(str(tag), []).append(name)

    def knows(self, name: str) -> bool:
        """Whether ``name`` is an indexed task, group or tag."""
        return name in self.files or name in self.tags


def _aggregates(path: Path, raw: Any) -> list[GroupAggregate]:
    out = []
    for i, a in enumerate(raw or []):
        where = f"{path}: aggregate_metric_list[{i}]"
        if not isinstance(a, dict) or "metric" not in a:
            raise UserError(f"{where}: each entry needs a 'metric'")
        extra = set(a) - {"metric", "aggregation", "weight_by_size", "filter_list"}
        if extra:
            raise UserError(f"{where}: key(s) {', '.join(sorted(extra))} are not supported")
        if a.get("aggregation", "mean") != "mean":
            raise UserError(f"{where}: aggregation '{a['aggregation']}' is not supported (mean only, as lm-eval)")
        filters = a.get("filter_list")
        filters = [None] if filters is None else [filters] if isinstance(filters, str) else list(filters)
        for f in filters:
            out.append(GroupAggregate(str(a["metric"]), bool(a.get("weight_by_size", True)), f))
    return out


def load_by_name(name: str, index: LmEvalIndex, seen: tuple[str, ...] = ()) -> TaskSelection:
    """The tasks (and groups) of an indexed task, group or tag name."""
    if name in seen:
        raise UserError(f"group '{seen[-1]}' includes '{name}', which includes it back")
    if name in index.files:
        return load_lmeval_file(index.files[name], index, (*seen, name))
    if name in index.tags:
        sel = TaskSelection()
        for member in index.tags[name]:
            sel.add(load_by_name(member, index, (*seen, name)))
        return sel
    raise UserError(f"lm-eval task or group '{name}' not found (pass its folder with --include-path)")


def _group(path: Path, data: dict[str, Any], index: LmEvalIndex, seen: tuple[str, ...]) -> TaskSelection:
    unknown = sorted(set(data) - _GROUP_KEYS)
    if unknown:
        raise UserError(f"{path}: group key '{unknown[0]}' is not supported by lmmbench")
    name = str(data["group"])
    sel = TaskSelection()
    members: list[str] = []
    for i, entry in enumerate(data["task"]):
        if isinstance(entry, str):
            sel.add(load_by_name(entry, index, (*seen, name)))
            members.append(entry)
        elif isinstance(entry, dict) and "task" in entry:
            base: dict[str, Any] = {}
            task_name = str(entry["task"])
            if task_name in index.files and not is_lmeval_mapping(entry):
                base_path = index.files[task_name]
                base = resolve_includes(base_path, read_lmeval_yaml(base_path))
            merged = {**base, **resolve_includes(path, entry)}
            sel.add(TaskSelection([task_from_lmeval(path, merged)]))
            members.append(task_name)
        else:
            raise UserError(f"{path}: task[{i}] must be a task name or a task mapping with 'task'")
    meta = data.get("metadata") or {}
    version = meta.get("version", 1) if isinstance(meta, dict) else 1
    sel.groups.append(LmEvalGroup(name, members, _aggregates(path, data.get("aggregate_metric_list")), version))
    return sel


def load_lmeval_file(path: Path, index: LmEvalIndex | None = None, seen: tuple[str, ...] = ()) -> TaskSelection:
    """The tasks (and groups) of an lm-eval task or group file; names resolve in ``index`` and the
    file's own folder."""
    data = resolve_includes(path, read_lmeval_yaml(path))
    if isinstance(data.get("task"), list) and "group" in data:
        local = LmEvalIndex([path.parent])
        if index is not None:
            local.files = {**local.files, **index.files}
            local.tags = {**local.tags, **index.tags}
        return _group(path, data, local, seen)
    if "group" in data:
        raise UserError(f"{path}: a group file needs 'task' as a list of task names or mappings")
    return TaskSelection([task_from_lmeval(path, data)])


def _pooled_stderr(stderrs: list[float], sizes: list[int]) -> float | None:
    """lm-eval's ``pooled_sample_stderr``."""
    if len(sizes) < 1 or sum(sizes) - len(sizes) <= 0:
        return None
    var = sum((n - 1) * se**2 * n for n, se in zip(sizes, stderrs, strict=True)) / (sum(sizes) - len(sizes))
    return math.sqrt(var / sum(sizes))


def _leaves(name: str, groups: dict[str, LmEvalGroup]) -> list[str]:
    if name not in groups:
        return [name]
    return [leaf for m in groups[name].members for leaf in _leaves(m, groups)]


def _filters_of(metric: str, members: Sequence[TaskResult]) -> list[str]:
    """The filters the members report ``metric`` under (lm-eval's discovery when filter_list is unset)."""
    found: list[str] = []
    for r in members:
        for key in r.metrics:
            base, _, flt = key.partition(",")
            if base == metric and (flt or "none") not in found:
                found.append(flt or "none")
    return found


def _aggregate(agg: GroupAggregate, key: str, have: list[MetricValue]) -> MetricValue:
    sizes = [m.n for m in have]
    weights = sizes if agg.weight_by_size else [1] * len(sizes)
    value = sum(m.value * w for m, w in zip(have, weights, strict=True)) / sum(weights)
    errs = [m.stderr for m in have]
    stderr: float | None = None
    if all(e is not None for e in errs):
        se = [float(e) for e in errs if e is not None]
        stderr = _pooled_stderr(se, sizes) if agg.weight_by_size else math.sqrt(sum(e**2 for e in se)) / len(se)
    return MetricValue(key, value, stderr, sum(sizes))


def group_results(
    groups: Sequence[LmEvalGroup], results: Sequence[TaskResult], results_dir: Path | None = None
) -> list[TaskResult]:
    """The results of ``groups`` over the results of their leaf tasks, as lm-eval 0.4.13 computes them:
    each metric over the leaves that report it, weighted by sample count (``weight_by_size``) with the
    pooled stderr, or unweighted with sqrt(Σ stderr²) / k. Each is also written to
    ``results_dir/<group>.json`` when given."""
    by_name = {g.name: g for g in groups}
    known: dict[str, TaskResult] = {r.task: r for r in results}
    out: list[TaskResult] = []
    for g in groups:
        leaves = [known[n] for n in dict.fromkeys(_leaves(g.name, by_name)) if n in known]
        metrics: dict[str, MetricValue] = {}
        for agg in g.aggregates:
            filters = [agg.filter] if agg.filter is not None else _filters_of(agg.metric, leaves)
            for flt in filters:
                key = _key(agg.metric, flt)
                have = [r.metrics[key] for r in leaves if key in r.metrics]
                if have:
                    metrics[key] = _aggregate(agg, key, have)
        model = leaves[0].model if leaves else ""
        n = sum(r.n_samples for r in leaves)
        res = TaskResult(g.name, g.version, "group", model, n, sum(r.n_errors for r in leaves), metrics)
        known[g.name] = res
        out.append(res)
        if results_dir is not None:
            text = json.dumps({**res.to_json(), "members": g.members}, indent=2, default=str) + "\n"
            (results_dir / f"{g.name}.json").write_text(text, encoding="utf-8")
    return out
