"""The run store: every finished run indexed with its headline metrics, for `lmmbench runs`.

SQLite at ``$LMMBENCH_HOME/runs.sqlite`` by default, through the standard library's ``sqlite3`` (so the
plain client install carries no database library); ``LMMBENCH_STORE_URL`` names any SQLAlchemy URL instead
(``postgresql://...`` for a team; ``pip install 'lmmbench[store]'``). Both run the same SQL, with named
parameters. The store holds an index, not the data: each row points at the run's folder, whose files stay
the truth. A run re-written in the same folder (a resumed spec run) replaces its row.

A run is found by its id, a unique id prefix, its folder, or its name (the newest run of that name; the
others of the name are named in a note).

The store records its schema version in ``lmmbench_store``; a store of an older lmmbench (no version, or a
lower one) is migrated in place when opened (missing columns and indexes added). A store that is not a
database, holds another program's ``runs`` table, was written by a newer lmmbench, or cannot be reached is
one ``UserError`` naming the store and how to move it aside; a row whose JSON is corrupt is skipped with a
warning.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.runs.log_schema import RunLog

__all__ = ["SCHEMA_VERSION", "RunStore", "StoredRun", "default_store_url"]

log = logging.getLogger("lmmbench.runs")

_COLUMNS = ("run_id", "kind", "name", "model", "labels_json", "started_at", "finished_at", "path", "interrupted",
            "ok", "failed", "git_commit", "host", "headline_json")  # fmt: skip
SCHEMA_VERSION = 2  # 1: the SQLAlchemy tables of the first run store (no version, no name index)
_COLUMN_TYPES = {"run_id": "VARCHAR(200)", "kind": "VARCHAR(32)", "name": "VARCHAR(300)", "model": "VARCHAR(500)",
                 "labels_json": "TEXT", "started_at": "VARCHAR(40)", "finished_at": "VARCHAR(40)",
                 "path": "VARCHAR(2000)", "interrupted": "BOOLEAN", "ok": "INTEGER", "failed": "INTEGER",
                 "git_commit": "VARCHAR(64)", "host": "VARCHAR(300)", "headline_json": "TEXT"}  # fmt: skip
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS lmmbench_store (key VARCHAR(64) PRIMARY KEY, value VARCHAR(200))",
    "CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR(200) PRIMARY KEY, kind VARCHAR(32), name VARCHAR(300), "
    "model VARCHAR(500), labels_json TEXT, started_at VARCHAR(40), finished_at VARCHAR(40), path VARCHAR(2000), "
    "interrupted BOOLEAN, ok INTEGER, failed INTEGER, git_commit VARCHAR(64), host VARCHAR(300), headline_json TEXT)",
    "CREATE INDEX IF NOT EXISTS ix_runs_kind ON runs (kind)",
    "CREATE INDEX IF NOT EXISTS ix_runs_model ON runs (model)",
    "CREATE INDEX IF NOT EXISTS ix_runs_started_at ON runs (started_at)",
    "CREATE INDEX IF NOT EXISTS ix_runs_path ON runs (path)",
    "CREATE INDEX IF NOT EXISTS ix_runs_name ON runs (name)",
    "CREATE TABLE IF NOT EXISTS run_metrics (run_id VARCHAR(200) REFERENCES runs (run_id) ON DELETE CASCADE, "
    "metric VARCHAR(300), value FLOAT)",
    "CREATE INDEX IF NOT EXISTS ix_run_metrics_run_id ON run_metrics (run_id)",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM runs"
_NEWEST = " ORDER BY started_at DESC, run_id DESC"


def default_store_url() -> str:
    """``$LMMBENCH_STORE_URL``, else SQLite under ``$LMMBENCH_HOME`` (default ~/.cache/lmmbench)."""
    url = os.environ.get("LMMBENCH_STORE_URL")
    if url:
        return url
    home = os.environ.get("LMMBENCH_HOME")
    root = Path(home).expanduser() if home else Path.home() / ".cache" / "lmmbench"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"LMMBENCH_HOME {root}: cannot create the folder ({exc.strerror or exc}); set LMMBENCH_HOME "
                        "to a folder lmmbench can write, or LMMBENCH_STORE_URL") from None  # fmt: skip
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


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class _Sqlite:
    """The default backend: the standard library's sqlite3."""

    def __init__(self, url: str) -> None:
        import sqlite3

        self.errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ":memory:"
        self.file = None if path == ":memory:" else Path(path)
        if self.file is not None:
            if self.file.is_dir():
                raise UserError(f"run store {url}: {path} is a folder, not a database file; "
                                "give a file with --store sqlite:///FILE or LMMBENCH_STORE_URL")  # fmt: skip
            try:
                self.file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"run store {url}: cannot create {self.file.parent} ({exc.strerror or exc}); "
                                "choose another store with --store or LMMBENCH_STORE_URL") from None  # fmt: skip
        try:
            self.conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
            self.conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise UserError(f"run store {url}: cannot open {path} ({exc}); choose another store with --store or "
                            "LMMBENCH_STORE_URL") from None  # fmt: skip

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.conn:
            yield self

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params or {})
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def executemany(self, sql: str, rows: list[dict[str, Any]]) -> None:
        self.conn.executemany(sql, rows)

    def tables(self) -> set[str]:
        return {r["name"] for r in self.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def columns(self, table: str) -> set[str]:
        return {r["name"] for r in self.execute(f"PRAGMA table_info({table})")}


class _SqlAlchemy:
    """Any other database, through SQLAlchemy (``lmmbench[store]``)."""

    def __init__(self, url: str) -> None:
        try:
            import sqlalchemy as sa
        except ImportError:
            raise UserError(f"run store {url}: databases other than SQLite need SQLAlchemy: "
                            "pip install 'lmmbench[store]'") from None
        self.sa = sa
        self.file = None
        self.errors = (sa.exc.SQLAlchemyError,)
        try:
            self.engine = sa.create_engine(url, pool_pre_ping=True)
        except ModuleNotFoundError as exc:  # the database's driver (psycopg, pymysql, ...)
            raise UserError(f"run store {url}: its database driver '{exc.name}' is not installed; "
                            f"pip install {exc.name}, or choose another store with --store") from None  # fmt: skip
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
            raise UserError(f"run store {url}: not a database URL this lmmbench can open ({exc}); "
                            "give e.g. sqlite:///runs.sqlite or postgresql://user@host/db") from None  # fmt: skip
        self.conn: Any = None

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.engine.begin() as conn:
            self.conn = conn
            try:
                yield self
            finally:
                self.conn = None

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        if self.conn is None:
            with self.transaction():
                return self.execute(sql, params)
        result = self.conn.execute(self.sa.text(sql), params or {})
        return [dict(r) for r in result.mappings()] if result.returns_rows else []

    def executemany(self, sql: str, rows: list[dict[str, Any]]) -> None:
        self.conn.execute(self.sa.text(sql), rows)

    def tables(self) -> set[str]:
        return set(self.sa.inspect(self.conn if self.conn is not None else self.engine).get_table_names())

    def columns(self, table: str) -> set[str]:
        inspector = self.sa.inspect(self.conn if self.conn is not None else self.engine)
        return {c["name"] for c in inspector.get_columns(table)}


class RunStore:
    """The index of runs behind one store URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.db: _Sqlite | _SqlAlchemy = _Sqlite(url) if url.startswith("sqlite:") else _SqlAlchemy(url)
        with self._guard("cannot open"):
            self._migrate()

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """A database error while ``doing`` is one line naming the store and how to move it aside."""
        try:
            yield
        except UserError:
            raise
        except self.db.errors as exc:
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            if self.db.file is not None:
                how = (f"move it aside (mv {self.db.file} {self.db.file}.bad) and lmmbench starts a new one, or choose "
                       "another store with --store / LMMBENCH_STORE_URL")  # fmt: skip
            else:
                how = "check that the database is up and the URL is right, or choose another store with --store"
            raise UserError(f"run store {self.url}: {doing} ({first}); {how}") from None

    def _migrate(self) -> None:
        """Create the tables, or bring a store of an older lmmbench schema up to ``SCHEMA_VERSION`` in place."""
        tables = self.db.tables()
        if "runs" in tables and not {"run_id", "path"} <= self.db.columns("runs"):
            raise UserError(f"run store {self.url}: its 'runs' table is not lmmbench's (no run_id / path column); "
                            "give lmmbench a store of its own with --store or LMMBENCH_STORE_URL")  # fmt: skip
        version = SCHEMA_VERSION if "runs" not in tables else 1
        if "lmmbench_store" in tables:
            rows = self.db.execute("SELECT value FROM lmmbench_store WHERE key = 'schema_version'")
            version = int(rows[0]["value"]) if rows and str(rows[0]["value"]).isdigit() else version
        if version > SCHEMA_VERSION:
            raise UserError(f"run store {self.url}: written by a newer lmmbench (schema {version}; this one reads up "
                            f"to {SCHEMA_VERSION}); upgrade lmmbench or choose another store with --store")  # fmt: skip
        with self.db.transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            for column in [c for c in _COLUMNS if c not in db.columns("runs")]:
                db.execute(f"ALTER TABLE runs ADD COLUMN {column} {_COLUMN_TYPES[column]}")
            if "lmmbench_store" not in tables or version < SCHEMA_VERSION:
                db.execute("DELETE FROM lmmbench_store WHERE key = 'schema_version'")
                db.execute("INSERT INTO lmmbench_store (key, value) VALUES ('schema_version', :v)",
                           {"v": str(SCHEMA_VERSION)})  # fmt: skip
        if "runs" in tables and version < SCHEMA_VERSION:
            log.warning("run store %s: migrated in place from schema %d to %d", self.url, version, SCHEMA_VERSION)

    @classmethod
    def open(cls, url: str | None = None) -> RunStore:
        """The store at ``url`` (default: ``default_store_url()``)."""
        return cls(url or default_store_url())

    def index(self, run_log: RunLog, run_dir: Path) -> None:
        """Add (or replace) the row of ``run_log``, whose files are in ``run_dir``."""
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
        with self._guard("cannot write the run's row"), self.db.transaction() as db:
            stale = [r["run_id"] for r in db.execute("SELECT run_id FROM runs WHERE path = :path OR run_id = :run_id",
                                                     {"path": path, "run_id": run_log.run_id})]  # fmt: skip
            for old in stale:
                db.execute("DELETE FROM run_metrics WHERE run_id = :run_id", {"run_id": old})
                db.execute("DELETE FROM runs WHERE run_id = :run_id", {"run_id": old})
            db.execute(f"INSERT INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join(':' + c for c in _COLUMNS)})",
                       row)  # fmt: skip
            values = [{"run_id": run_log.run_id, "metric": k, "value": v} for k, v in run_log.headline.items()
                      if v is not None]  # fmt: skip
            if values:
                db.executemany("INSERT INTO run_metrics (run_id, metric, value) VALUES (:run_id, :metric, :value)",
                               values)  # fmt: skip

    def _query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        with self._guard("cannot read"):
            return self.db.execute(sql, params)

    def _stored(self, r: dict[str, Any]) -> StoredRun | None:
        """The row as a ``StoredRun``; None (and a warning) for a row whose JSON columns are corrupt."""
        try:
            labels, headline = json.loads(r["labels_json"] or "{}"), json.loads(r["headline_json"] or "{}")
            if not isinstance(labels, dict) or not isinstance(headline, dict):
                raise ValueError("not a JSON object")
        except (ValueError, TypeError) as exc:
            log.warning("run store %s: row %s skipped, its labels or headline are corrupt (%s); `lmmbench runs index "
                        "%s` rewrites it from the run's folder", self.url, r["run_id"], exc, r["path"])  # fmt: skip
            return None
        return StoredRun(
            run_id=r["run_id"], kind=r["kind"], name=r["name"], model=r["model"], labels=labels,
            started_at=r["started_at"], finished_at=r["finished_at"], path=r["path"],
            interrupted=bool(r["interrupted"]), ok=r["ok"], failed=r["failed"], git_commit=r["git_commit"],
            host=r["host"], headline=headline,
        )  # fmt: skip

    def _readable(self, rows: list[dict[str, Any]]) -> list[StoredRun]:
        return [run for run in (self._stored(r) for r in rows) if run is not None]

    def list(self, *, kind: str | None = None, model: str | None = None, labels: dict[str, str] | None = None,
             since: str | None = None, until: str | None = None, limit: int | None = None) -> list[StoredRun]:
        """Runs, newest first, filtered by kind, model (substring), labels (all must match) and start date
        (``since`` / ``until`` compared as ISO text, so a date or a date-time both work)."""
        where, params = [], {}
        if kind:
            where.append("kind = :kind")
            params["kind"] = kind
        if model:
            where.append("model LIKE :model ESCAPE '\\'")
            params["model"] = f"%{_escape_like(model)}%"
        if since:
            where.append("started_at >= :since")
            params["since"] = since
        if until:
            where.append("started_at <= :until")
            params["until"] = until + "\uffff"
        sql = _SELECT + (f" WHERE {' AND '.join(where)}" if where else "") + _NEWEST
        rows = self._readable(self._query(sql, params))
        if labels:
            rows = [r for r in rows if all(str(r.labels.get(k)) == v for k, v in labels.items())]
        return rows[:limit] if limit else rows

    def get(self, ref: str) -> StoredRun:
        """The run ``ref`` names: its id, a unique id prefix, its folder (indexed on the fly), or its name
        (the newest run of that name; a note names the others). Corrupt rows are skipped with a warning."""
        exact = self._readable(self._query(_SELECT + " WHERE run_id = :ref", {"ref": ref}))
        if exact:
            return exact[0]
        rows = self._readable(self._query(_SELECT + " WHERE run_id LIKE :prefix ESCAPE '\\'" + _NEWEST,
                                          {"prefix": _escape_like(ref) + "%"}))  # fmt: skip
        if len(rows) > 1:
            raise UserError(f"'{ref}' matches {len(rows)} runs ({', '.join(r.run_id for r in rows[:5])}...); "
                            "give more of the id")  # fmt: skip
        if rows:
            return rows[0]
        folder = Path(ref)
        if folder.is_dir() or folder.is_file():
            return self._get_folder(folder)
        named = self._readable(self._query(_SELECT + " WHERE name = :name" + _NEWEST, {"name": ref}))
        if named:
            if len(named) > 1:
                others = ", ".join(r.run_id for r in named[1:6])
                log.warning("'%s' names %d runs: using the newest, %s (others: %s)", ref, len(named),
                            named[0].run_id, others)  # fmt: skip
            return named[0]
        raise UserError(f"no run '{ref}' in the run store ({self.url}): give a run id, id prefix, run folder or "
                        "run name; see `lmmbench runs list`")

    def _get_folder(self, folder: Path) -> StoredRun:
        from lmmbench.core.runs.log_schema import load_run_log

        run_log = load_run_log(folder)
        run_dir = folder if folder.is_dir() else folder.parent
        if run_log.legacy_layout == "eval-config" and folder.is_file():
            run_dir = folder.parent.parent
        self.index(run_log, run_dir)
        indexed = self._readable(self._query(_SELECT + " WHERE run_id = :ref", {"ref": run_log.run_id}))
        if not indexed:
            raise UserError(f"{folder}: its run could not be read back from the run store ({self.url})")
        return indexed[0]
