"""The run folder of a perf run: claimed (never appended to another run), a crashed run's journal kept
aside, a resumed run's earlier points and status read, an empty folder removed when nothing was measured."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError
from lmmbench.loadgen.journal import JOURNAL_NAME
from lmmbench.sessions.perf.resume import Previous, load_previous

__all__ = ["RUN_FILES", "claim_run_dir", "keep_crashed_journal", "previous_points", "previous_status",
           "remove_empty_run"]  # fmt: skip

RUN_FILES = ("run.json", "records.jsonl", "records.csv", "summary.csv", "report.json", JOURNAL_NAME)


def claim_run_dir(cfg: PerfConfig) -> Path:
    """The run folder: a default name never collides; a named folder that holds a run is refused unless
    --overwrite (its files are then removed), so one run is never appended to another."""
    root = cfg.out_dir / "perf"
    if cfg.resume and (cfg.run_name is None or cfg.action == "search"):
        raise UserError("--resume continues a `perf` run by name: give its --run-name (perf search restarts; "
                        "use --overwrite)")
    if cfg.run_name is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir, n = root / stamp, 1
        while run_dir.exists():
            n += 1
            run_dir = root / f"{stamp}_{n}"
        return run_dir
    run_dir = root / cfg.run_name
    held = [f for f in RUN_FILES if (run_dir / f).exists()]
    if cfg.resume and (run_dir / "run.json").is_file():
        return run_dir  # continued by run_perf: its finished points are kept
    if held and not cfg.overwrite:
        raise UserError(f"{run_dir} already holds a run ({held[0]}); pass --overwrite to replace it, "
                        f"another --run-name, or `lmmbench perf recover {run_dir}` if it crashed")
    if held:
        _clear_replaced_run(run_dir)
    return run_dir


def _clear_replaced_run(run_dir: Path) -> None:
    """Remove everything the replaced run wrote (files and folders: plots, comparison, result files, logs), so
    nothing of it is mistaken for the new run's; a crashed run's journals are kept aside, never deleted."""
    import shutil

    for p in run_dir.iterdir():
        if p.name == JOURNAL_NAME or p.name.startswith("records.partial.crashed-"):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def keep_crashed_journal(run_dir: Path) -> None:
    """A journal left by a run that crashed in this folder is renamed, never appended to or removed."""
    journal = run_dir / JOURNAL_NAME
    if journal.exists():
        kept = journal.with_name(f"records.partial.crashed-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        journal.rename(kept)
        print(f"[perf] a crashed run left {journal.name}; kept as {kept.name}", file=sys.stderr)


def previous_status(run_dir: Path) -> str | None:
    """The status the run log of the run in ``run_dir`` records (complete, interrupted, failed)."""
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    status = info.get("status") or (info.get("run") or {}).get("status")  # the run log's, or older logs' run
    return str(status) if status is not None else None


def previous_points(base: PerfConfig, run_dir: Path, points: list[dict[str, Any]]) -> Previous | None:
    """What the run being resumed already measured (None when this is not a resume)."""
    if not (base.resume and (run_dir / "run.json").is_file()):
        return None
    prev = load_previous(run_dir, points)
    print(f"[perf] resuming {run_dir}: {len(prev.done)} of {len(points)} point(s) already measured",
          file=sys.stderr)  # fmt: skip
    return prev


def remove_empty_run(run_dir: Path, fresh: bool) -> None:
    """Remove a run's files (and its folder when this run made it): it failed before measuring anything."""
    for name in (*RUN_FILES, "report.html"):
        (run_dir / name).unlink(missing_ok=True)
    if fresh:
        with contextlib.suppress(OSError):
            run_dir.rmdir()
