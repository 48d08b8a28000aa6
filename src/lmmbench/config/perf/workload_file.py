"""Workload files of ``lmmbench perf --workload``: lmmbench YAML, or a ByteMLPerf workload JSON as it is.

lmmbench YAML: any ``PerfConfig`` field at the top level, plus ``points``: a list of overrides,
one load point each (e.g. ``{concurrency: 8, input_tokens: 512}`` or ``{rate: 100}``).

ByteMLPerf JSON, in today's nested layout or the design document's flat one (``config.perf.bytemlperf``):
every (tp, batch, input_tokens) combination with tp at or above ``min_tp_size`` is a point that runs
``perf_time`` seconds with ``batch`` concurrent clients (none when ``test_perf`` is false), each asking for
``perf_config.output_tokens`` tokens (flat layout: ``max_new_tokens``, with ``min_new_tokens`` as
``min_tokens``). A bare name (``chatglm2-torch-fp16-6b``) is found as ``NAME.json`` in ``--workloads-dir``,
else ``./workloads``, else ByteMLPerf's ``llm_perf/workloads`` under the working directory, as ByteMLPerf's
launcher finds ``--task``; the workload's relative ``dataset`` resolves against the ByteMLPerf root the file
sits under (``<root>/llm_perf/workloads/NAME.json``), then the file's own folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmmbench.config.limits import check_limit
from lmmbench.config.loaders import load_config_file
from lmmbench.config.perf.bytemlperf import (
    ByteMLPerfWorkload,
    is_bytemlperf_workload,
    parse_bytemlperf,
    read_json_file,
    refuse_unknown,
)
from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError

__all__ = ["bytemlperf_root", "bytemlperf_version", "bytemlperf_workload", "dataset_path", "find_workload",
           "load_workload", "workload_search_dirs"]  # fmt: skip


def _read(path: Path) -> dict[str, Any]:
    """The mapping of a workload file: ``.json`` parsed as JSON (strict numbers), anything else as YAML."""
    if path.suffix.lower() != ".json":
        return load_config_file(path)
    from lmmbench.config.input_files import read_text

    data = read_json_file(path, read_text(path, "workload file"))
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object at the top level")
    return data


def workload_search_dirs(workloads_dir: Path | None, cwd: Path | None = None) -> list[Path]:
    """Where a bare workload name is looked for, in order."""
    if workloads_dir is not None:
        return [workloads_dir]
    here = cwd or Path.cwd()
    return [here / "workloads", here / "llm_perf" / "workloads", here / "byte_infer_perf" / "llm_perf" / "workloads"]


def _is_bare_name(text: str) -> bool:
    return bool(text) and "/" not in text and "\\" not in text and not text.endswith((".json", ".yaml", ".yml"))


def find_workload(workload: Path, workloads_dir: Path | None = None) -> Path:
    """The file of ``--workload``: a path as given, or a bare name found as ``NAME.json`` (ByteMLPerf's task)."""
    text = str(workload)
    if workload.expanduser().is_file() or not _is_bare_name(text):
        return workload.expanduser()
    dirs = workload_search_dirs(workloads_dir)
    for d in dirs:
        cand = d / f"{text}.json"
        if cand.is_file():
            return cand
    raise UserError(f"--workload {text}: no file {text}.json in {', '.join(str(d) for d in dirs)} (a bare name is a "
                    "ByteMLPerf task; give --workloads-dir DIR or a path)")  # fmt: skip


def bytemlperf_root(path: Path) -> Path | None:
    """ByteMLPerf's root (``byte_infer_perf``) when ``path`` is ``<root>/llm_perf/workloads/NAME.json``."""
    p = path.resolve()
    if p.parent.name == "workloads" and p.parent.parent.name == "llm_perf":
        return p.parent.parent.parent
    return None


def bytemlperf_version(root: Path | None) -> str | None:
    """ByteMLPerf's version as its launcher reads it (``<root>/../VERSION``: ``major=1`` lines joined by dots)."""
    if root is None:
        return None
    try:
        lines = (root.parent / "VERSION").read_text(encoding="utf-8").splitlines()
        return ".".join(line.split("=", 1)[1].strip() for line in lines if "=" in line) or None
    except (OSError, UnicodeDecodeError):
        return None


def dataset_path(wl: ByteMLPerfWorkload) -> Path:
    """The workload's ``dataset`` file: absolute, else under ByteMLPerf's root, else beside the workload file."""
    assert wl.dataset is not None
    given = Path(wl.dataset).expanduser()
    root = bytemlperf_root(wl.path)
    tried = [given] if given.is_absolute() else [*([root / given] if root else []), wl.path.parent / given]
    for p in tried:
        if p.is_file():
            return p
    raise UserError(f"{wl.path}: dataset '{wl.dataset}' not found (looked at {', '.join(str(p) for p in tried)})")


def bytemlperf_workload(path: Path) -> ByteMLPerfWorkload | None:
    """The ByteMLPerf workload at ``path``; None for lmmbench YAML."""
    data = _read(path)
    return parse_bytemlperf(path, data) if is_bytemlperf_workload(data) else None


def _points(wl: ByteMLPerfWorkload) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    base: dict[str, Any] = {"labels": {"workload": wl.task, "workload_model": wl.model}}
    if not wl.test_perf:
        return base, []  # ByteMLPerf's test_perf: false: no load point at all
    assert wl.perf_time is not None
    check_limit("duration_s", wl.perf_time, f"{wl.path}: perf_time")
    tps = wl.perf_tp_sizes
    check_limit("sweep_points", len(tps) * len(wl.batch_sizes) * len(wl.input_tokens),
                f"{wl.path}: tp_sizes x batch_sizes x input_tokens")  # fmt: skip
    check_limit("batch_size", max(wl.batch_sizes), f"{wl.path}: batch_sizes")
    check_limit("input_tokens", max(wl.input_tokens), f"{wl.path}: input_tokens")
    gen: dict[str, Any] = {}
    if wl.layout == "nested":  # ByteMLPerf's perf client asks for exactly output_tokens (min = max)
        gen = {"output_tokens": wl.output_tokens, "ignore_eos": True}
    elif wl.max_new_tokens is not None:
        gen = {"output_tokens": wl.max_new_tokens}
        if wl.min_new_tokens is not None and wl.min_new_tokens != wl.max_new_tokens:  # the server's EOS decides
            gen.update(extra_body={"min_tokens": wl.min_new_tokens}, ignore_eos=False)
    points = []
    for tp in tps:
        for bs in wl.batch_sizes:
            for it in wl.input_tokens:
                points.append({"concurrency": bs, "input_tokens": it, "duration_s": wl.perf_time, "num_requests": None,
                               **gen, "labels": {"tp": tp, "batch": bs}})  # fmt: skip
    return base, points


def load_workload(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(base settings, points) of a workload file; each point is a dict of ``PerfConfig`` overrides."""
    data = _read(path)
    if is_bytemlperf_workload(data):
        return _points(parse_bytemlperf(path, data))
    points = data.pop("points", None)
    if points is None:
        points = [{}]
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        raise UserError(f"{path}: 'points' must be a list of mappings")
    check_limit("sweep_points", len(points), f"{path}: points")
    fields = [*PerfConfig.model_fields]
    for where, mapping in [("top level", data)] + [(f"points[{i}]", p) for i, p in enumerate(points)]:
        refuse_unknown(path, where, mapping, fields, list_known=False)
    return data, points
