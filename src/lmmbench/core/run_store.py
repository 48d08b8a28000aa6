"""The run store: every finished run indexed with its headline metrics, for `lmmbench runs`.

SQLite at ``$LMMBENCH_HOME/runs.sqlite`` by default; ``LMMBENCH_STORE_URL`` names any SQLAlchemy
URL instead (``postgresql://...`` for a team). The store holds an index, not the data: each row
points at the run's folder, whose files stay the truth. A run re-written in the same folder (a
resumed spec run) replaces its row.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.run_log import RunLog

__all__ = ["RunStore", "StoredRun", "default_store_url"]


def default_store_url() -> str:
    """``$LMMBENCH_STORE_URL``, else SQLite under ``$LMMBENCH_HOME`` (default ~/.cache/lmmbench)."""
    url = os.environ.get("LMMBENCH_STORE_URL")
    if url:
        return url
    home = os.environ.get("LMMBENCH_HOME")
    root = Path(home).expanduser() if home else Path.home() / ".cache" / "lmmbench"
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'runs.sqlite'}"


@dataclass
class StoredRun:
    """One row of the store."""

    run_id: str
    kind: str
    name: str
    model: str | None
    labels: dict[str, Any]
    started_at: str | None
    finished_at: str | None
    path: str
    interrupted: bool
    ok: int | None
    failed: int | None
    git_commit: str | None
    host: str | None
    headline: dict[str, float | None]


class RunStore:
    """The index of runs behind one SQLAlchemy URL."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.url = url
        self.engine = sa.create_engine(url)
        meta = sa.MetaData()
        self.runs = sa.Table(
            "runs", meta,
            sa.Column("run_id", sa.String(200), primary_key=True),
            sa.Column("kind", sa.String(32), index=True),
            sa.Column("name", sa.String(300)),
            sa.Column("model", sa.String(500), index=True),
            sa.Column("labels_json", sa.Text),
            sa.Column("started_at", sa.String(40), index=True),
            sa.Column("finished_at", sa.String(40)),
            sa.Column("path", sa.String(2000), index=True),
            sa.Column("interrupted", sa.Boolean),
            sa.Column("ok", sa.Integer),
            sa.Column("failed", sa.Integer),
            sa.Column("git_commit", sa.String(64)),
            sa.Column("host", sa.String(300)),
            sa.Column("headline_json", sa.Text),
        )  # fmt: skip
        self.metrics = sa.Table(
            "run_metrics", meta,
            sa.Column("run_id", sa.String(200), sa.ForeignKey("runs.run_id", ondelete="CASCADE"), index=True),
            sa.Column("metric", sa.String(300)),
            sa.Column("value", sa.Float),
        )  # fmt: skip
        meta.create_all(self.engine)

    @classmethod
    def open(cls, url: str | None = None) -> RunStore:
        """The store at ``url`` (default: ``default_store_url()``)."""
        return cls(url or default_store_url())

    def index(self, run_log: RunLog, run_dir: Path) -> None:
        """Add (or replace) the row of ``run_log``, whose files are in ``run_dir``."""
        import sqlalchemy as sa

        path = str(Path(run_dir).resolve())
        env = run_log.environment
        git = env.get("git") if isinstance(env.get("git"), dict) else {}
        row = {
            "run_id": run_log.run_id, "kind": run_log.kind, "name": run_log.name, "model": run_log.model,
            "labels_json": json.dumps(run_log.labels, default=str), "started_at": run_log.started_at,
            "finished_at": run_log.finished_at, "path": path, "interrupted": run_log.outcome.interrupted,
            "ok": run_log.outcome.ok, "failed": run_log.outcome.failed,
            "git_commit": (git or {}).get("commit") or env.get("git_commit"), "host": env.get("host"),
            "headline_json": json.dumps(run_log.headline),
        }  # fmt: skip
        with self.engine.begin() as conn:
            stale = [r[0] for r in conn.execute(sa.select(self.runs.c.run_id).where(
                sa.or_(self.runs.c.path == path, self.runs.c.run_id == run_log.run_id)))]  # fmt: skip
            if stale:
                conn.execute(sa.delete(self.metrics).where(self.metrics.c.run_id.in_(stale)))
                conn.execute(sa.delete(self.runs).where(self.runs.c.run_id.in_(stale)))
            conn.execute(sa.insert(self.runs), [row])
            values = [{"run_id": run_log.run_id, "metric": k, "value": v} for k, v in run_log.headline.items()
                      if v is not None]  # fmt: skip
            if values:
                conn.execute(sa.insert(self.metrics), values)

    def _stored(self, r: Any) -> StoredRun:
        return StoredRun(
            run_id=r.run_id, kind=r.kind, name=r.name, model=r.model, labels=json.loads(r.labels_json or "{}"),
            started_at=r.started_at, finished_at=r.finished_at, path=r.path, interrupted=bool(r.interrupted),
            ok=r.ok, failed=r.failed, git_commit=r.git_commit, host=r.host,
            headline=json.loads(r.headline_json or "{}"),
        )  # fmt: skip

    def list(self, *, kind: str | None = None, model: str | None = None, labels: dict[str, str] | None = None,
             since: str | None = None, until: str | None = None, limit: int | None = None) -> list[StoredRun]:
        """Runs, newest first, filtered by kind, model (substring), labels (all must match) and start date
        (``since`` / ``until`` compared as ISO text, so a date or a date-time both work)."""
        import sqlalchemy as sa

        q = sa.select(self.runs).order_by(self.runs.c.started_at.desc(), self.runs.c.run_id.desc())
        if kind:
            q = q.where(self.runs.c.kind == kind)
        if model:
            q = q.where(self.runs.c.model.contains(model, autoescape=True))
        if since:
            q = q.where(self.runs.c.started_at >= since)
        if until:
            q = q.where(self.runs.c.started_at <= until + "\uffff")
        with self.engine.connect() as conn:
            rows = [self._stored(r) for r in conn.execute(q)]
        if labels:
            rows = [r for r in rows if all(str(r.labels.get(k)) == v for k, v in labels.items())]
        return rows[:limit] if limit else rows

    def get(self, ref: str) -> StoredRun:
        """The run named by ``ref``: a run id, a unique id prefix, or a run folder (indexed on the fly)."""
        import sqlalchemy as sa

        folder = Path(ref)
        if folder.is_dir() or folder.is_file():
            from lmmbench.core.run_log import load_run_log

            run_log = load_run_log(folder)
            run_dir = folder if folder.is_dir() else folder.parent
            if run_log.legacy_layout == "eval-config" and folder.is_file():
                run_dir = folder.parent.parent
            self.index(run_log, run_dir)
            ref = run_log.run_id
        with self.engine.connect() as conn:
            rows = list(conn.execute(sa.select(self.runs).where(self.runs.c.run_id.startswith(ref, autoescape=True))))
        exact = [r for r in rows if r.run_id == ref]
        if exact or len(rows) == 1:
            return self._stored((exact or rows)[0])
        if not rows:
            raise UserError(f"no run '{ref}' in the run store ({self.url}); see `lmmbench runs list`")
        raise UserError(f"'{ref}' matches {len(rows)} runs ({', '.join(r.run_id for r in rows[:5])}...); give more")
