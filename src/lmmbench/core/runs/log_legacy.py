"""Reading run logs of every layout: today's schema, and the three written before it.

- spec ``schema_version`` 1 (``reports.run_info.run_record``): ``spec``, ``stats``, ``run``, ``timer``;
- perf, unversioned (``sessions.perf.session``): ``config``, ``points``, ``environment`` with
  ``versions`` / ``git_commit`` / ``time_utc``;
- eval, ``logs/config_<mode>.json`` (``evaluation.modes``): ``config`` and ``environment`` only.

A TTFT breakdown written before the TTFT study's names were kept (``core.ttft_names``) gets its
headline recomputed from its results in today's names, whatever its layout.

Older layouts get a stable id derived from their folder (``legacy-<kind>-<hash>``), and counts and
headline metrics read from the files the run wrote beside them where those exist.

This module returns the fields of a ``RunLog`` (and the mappings its ``Measurement`` is read from);
``core.runs.log.load_run_log`` builds the model, so this module never imports the one that calls it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.runs.summaries import eval_headline, perf_headline, spec_headline
from lmmbench.core.ttft_names import LEGACY_PREFILL_PARTS

__all__ = ["LegacyFields", "upgrade"]

#: The fields of a ``RunLog``, and the mappings its ``Measurement`` is read from (``None``: already in the fields).
LegacyFields = tuple[dict[str, Any], tuple[dict[str, Any], ...] | None]


def _legacy_id(kind: str, folder: Path) -> str:
    digest = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:8]
    return f"legacy-{kind}-{digest}"


def _csv_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    from lmmbench.core.csv_rows import csv_rows

    return csv_rows(path.read_text(encoding="utf-8"))


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _spec_v1(data: dict[str, Any], folder: Path) -> LegacyFields:
    spec = str(data.get("spec") or folder.name)
    stats = data.get("stats") or {}
    extra = data.get("run") or {}
    config = data.get("config") or {}
    model_rec: dict[str, Any] = extra["model"] if isinstance(extra.get("model"), dict) else {}
    rows = _csv_rows(folder / f"{spec}_results.csv")
    return dict(
        run_id=_legacy_id("spec", folder), kind="spec", name=spec, model=config.get("model"),
        started_at=data.get("started_at"), finished_at=data.get("finished_at"), config=config,
        environment=data.get("environment") or {},
        outcome={"ok": stats.get("ok"), "failed": stats.get("failed"), "skipped": stats.get("skipped_already_done"),
                 "interrupted": bool(stats.get("interrupted"))},
        headline=spec_headline(rows), run=extra, files=_files(folder), legacy_layout="spec-v1",
    ), (extra, model_rec, config)  # fmt: skip


def _perf_v0(data: dict[str, Any], folder: Path) -> LegacyFields:
    config = data.get("config") or {}
    env = dict(data.get("environment") or {})
    env.setdefault("libraries", env.get("versions"))
    env.setdefault("git", {"commit": env.get("git_commit"), "dirty": None})
    rows = _csv_rows(folder / "summary.csv")
    ok = sum(int(r.get("ok") or 0) for r in rows)
    errors = sum(int(r.get("errors") or 0) for r in rows)
    report = json.loads((folder / "report.json").read_text()) if (folder / "report.json").is_file() else {}
    return dict(
        run_id=_legacy_id("perf", folder), kind="perf", name=folder.name,
        model=report.get("Model") or config.get("model"), labels=config.get("labels") or {},
        started_at=env.get("time_utc"), finished_at=env.get("time_utc"), config=config, environment=env,
        outcome={"ok": ok if rows else None, "failed": errors if rows else None},
        headline=perf_headline(rows), run={"points": data.get("points") or []}, files=_files(folder),
        legacy_layout="perf-v0",
    ), ({"event_loop": config.get("loop")},)  # fmt: skip


def _eval_config(data: dict[str, Any], path: Path) -> LegacyFields:
    folder = path.parent.parent if path.parent.name == "logs" else path.parent
    config = data.get("config") or {}
    results = []
    for p in sorted((folder / "results").glob("*.json")):
        try:
            results.append(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            continue
    n_ok = sum(int(r.get("n_samples") or 0) for r in results)
    n_err = sum(int(r.get("n_errors") or 0) for r in results)
    return dict(
        run_id=_legacy_id("eval", folder), kind="eval", name=folder.name, model=config.get("model"),
        config=config, environment=data.get("environment") or {},
        outcome={"ok": n_ok if results else None, "failed": n_err if results else None},
        headline=eval_headline(results), files=_files(folder), legacy_layout="eval-config",
        finished_at=None,
    ), (config,)  # fmt: skip


def _study_names(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A spec run whose headline predates the TTFT study's names (merge, rope index and lm_head in
    others) gets its headline again from its results, read in today's names; otherwise as it is."""
    headline = data.get("headline") or {}
    if data.get("kind") != "spec" or not any(f"{k}_median" in headline for k in LEGACY_PREFILL_PARTS):
        return data
    rows = _csv_rows(folder / f"{data.get('name')}_results.csv")
    return {**data, "headline": spec_headline(rows)} if rows else data


def upgrade(data: dict[str, Any], path: Path) -> LegacyFields:
    """The ``RunLog`` fields of the JSON at ``path``, whichever layout wrote it."""
    folder = path.parent
    version = data.get("schema_version")
    if version == 2 or (isinstance(version, int) and version > 2 and "kind" in data):
        return _study_names(data, folder), None
    if version == 1 and "spec" in data:
        return _spec_v1(data, folder)
    if path.name.startswith("config_") and "config" in data:
        return _eval_config(data, path)
    if "points" in data and "config" in data:
        return _perf_v0(data, folder)
    raise UserError(f"{path}: not a run log lmmbench knows (no schema_version, spec, points or eval config)")
