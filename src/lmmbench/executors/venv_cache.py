"""The venvs of plan rows kept bounded: when each was last used, which are in use, and removing the least
recently used beyond the bounds ``venvs_kept`` / ``venvs_bytes`` of the limits table (or a user's ``envs prune``
options). The environment manager's ``cleanup`` of the VLMHyperBench design, for lmmbench's venv cache.

Layout of ``$LMMBENCH_HOME/venvs`` (``executors.venvs`` builds it):

- ``<key>/`` the venv; its marker ``lmmbench-venv.json`` is written when the build ends, and the marker's
  mtime is the venv's last use (set when a row takes the venv and again when it lets it go);
- ``<key>.lock`` held exclusively while the venv is built, checked or removed;
- ``<key>.use`` held shared by every process running a row in the venv (a :class:`VenvLease`): a venv is
  removed only by a process that can lock it exclusively, so a venv a running row uses is never removed,
  and a process that dies lets go of its lock with it;
- ``<key>.log`` the build's log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["MARKER", "PruneResult", "VenvEntry", "VenvLease", "choose_removals", "hold_running_venv", "list_venvs",
           "lock_file", "prune_venvs", "take_lease", "venv_usage", "venvs_dir"]  # fmt: skip

MARKER = "lmmbench-venv.json"
_SUFFIXES = (".lock", ".use", ".log")


def venvs_dir(home: Path) -> Path:
    """Where the venvs of ``home`` (``$LMMBENCH_HOME``) live."""
    return home / "venvs"


def lock_file(path: Path, exclusive: bool, wait: bool) -> IO[str] | None:
    """``path`` opened and ``flock``-ed (exclusive or shared); None when ``wait`` is false and another process
    holds it. The lock returned is on the file that is at ``path`` (a remover unlinks a lock file while it holds
    it: a process that was waiting for the old file tries again)."""
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    while True:
        fh = path.open("a")
        try:
            fcntl.flock(fh, mode)
        except BlockingIOError:
            fh.close()
            return None
        try:
            same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fh
        fh.close()
        if not wait:
            return None


def _touch(root: Path) -> None:
    with contextlib.suppress(FileNotFoundError):  # removed meanwhile (not while a lease holds it)
        os.utime(root / MARKER)


class VenvLease:
    """A row's hold on its venv: a shared lock on ``<key>.use`` (nothing removes the venv while it is held);
    taking and releasing it each record a use (the marker's mtime)."""

    def __init__(self, root: Path, handle: IO[str]) -> None:
        self.root = root
        self._handle: IO[str] | None = handle
        _touch(root)

    def release(self) -> None:
        """Record the last use and let go (a second call does nothing)."""
        if self._handle is not None:
            _touch(self.root)
            self._handle.close()
            self._handle = None


def take_lease(root: Path) -> VenvLease:
    """Hold the venv at ``root`` for a row (call it while holding ``<key>.lock``, as ``ensure_venv`` does)."""
    handle = lock_file(root.parent / f"{root.name}.use", exclusive=False, wait=True)
    assert handle is not None  # a waiting lock always comes back
    return VenvLease(root, handle)


def hold_running_venv() -> VenvLease | None:
    """In a process whose interpreter is a venv of the cache (a venv row's worker): hold that venv until the process
    exits, so a driver killed without letting go of its rows' venvs leaves them held while its workers run on."""
    prefix = Path(sys.prefix)
    if prefix.parent.name != "venvs" or not (prefix / MARKER).is_file():
        return None
    return take_lease(prefix)


@dataclass(frozen=True)
class VenvEntry:
    """One environment under ``$LMMBENCH_HOME/venvs``, as found now."""

    key: str
    path: Path
    complete: bool  # its build finished (the marker exists); else a build that crashed or is running
    in_use: bool  # a row holds it, or it is being built or removed
    last_used_s: float  # wall-clock seconds since the epoch: the marker's mtime (no marker: the newest file's)
    size_bytes: int  # disk usage as ``du`` counts it (each inode once), its build log included
    frees_bytes: int | None  # what removing it frees: files with no hard link outside it (uv links from its
    # cache); None when not measured now (``size_bytes`` is then the size recorded when it was built)
    requirements: list[str] = field(default_factory=list)
    python: str | None = None
    isolation: str | None = None
    setup_s: float | None = None
    problem: str | None = None  # a marker that cannot be read as lmmbench wrote it: listed broken, prunable

    def as_json(self) -> dict[str, Any]:
        """The entry as ``envs list --json`` prints it."""
        return {"key": self.key, "path": str(self.path), "requirements": self.requirements, "python": self.python,
                "isolation": self.isolation, "complete": self.complete, "in_use": self.in_use,
                "last_used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.last_used_s)),
                "last_used_s": self.last_used_s, "size_bytes": self.size_bytes, "frees_bytes": self.frees_bytes,
                "setup_s": self.setup_s, "problem": self.problem}  # fmt: skip


def _usage(paths: list[Path]) -> tuple[int, int, float]:
    """(du bytes, bytes freed by removing them, newest mtime) of files and folders, symlinks not followed."""
    seen: dict[tuple[int, int], list[int]] = {}  # inode -> [bytes, links, links seen here, is a folder]
    newest = 0.0
    stack = [str(p) for p in paths]
    while stack:
        path = stack.pop()
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        newest = max(newest, st.st_mtime)
        key = (st.st_dev, st.st_ino)
        if key in seen:
            seen[key][2] += 1
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        seen[key] = [st.st_blocks * 512, st.st_nlink, 1, int(is_dir)]
        if is_dir:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, PermissionError), \
                    os.scandir(path) as found:
                stack += [e.path for e in found]
    du = sum(v[0] for v in seen.values())
    frees = sum(v[0] for v in seen.values() if v[3] or v[2] >= v[1])
    return du, frees, newest


def _probe(path: Path) -> bool:
    """Whether another process holds the lock file ``path`` (it is taken and let go at once when free)."""
    if not path.exists():
        return False
    handle = lock_file(path, exclusive=True, wait=False)
    if handle is None:
        return True
    handle.close()
    return False


def _paths(venvs: Path, key: str) -> list[Path]:
    return [venvs / key, *(venvs / f"{key}{s}" for s in _SUFFIXES)]


def venv_usage(venvs: Path, key: str) -> tuple[int, int]:
    """(du bytes, bytes removing it frees) of one environment: its folder, lock and log files."""
    du, frees, _ = _usage(_paths(venvs, key))
    return du, frees


def _record_size(venvs: Path, key: str, meta: dict[str, Any], du: int) -> None:
    """Add ``size_bytes`` to a venv's marker, keeping its mtime (the last use); skipped while it is locked."""
    lock = lock_file(venvs / f"{key}.lock", exclusive=True, wait=False)
    if lock is None:
        return
    with lock:
        marker = venvs / key / MARKER
        tmp = marker.with_name(f"{MARKER}.tmp")
        try:
            tmp.write_text(json.dumps({**meta, "size_bytes": du}, indent=2), encoding="utf-8")
            mtime = marker.stat().st_mtime
            os.utime(tmp, (mtime, mtime))
            os.replace(tmp, marker)  # readers see the old marker or the new one, never a part
        except OSError:
            tmp.unlink(missing_ok=True)


def _marker_problem(meta: Any) -> str | None:
    """What is wrong with a venv's marker (None: it is as lmmbench writes it)."""
    if not isinstance(meta, dict):
        return f"its {MARKER} is a JSON {type(meta).__name__}, not an object"
    reqs = meta.get("requirements")
    if reqs is not None and (not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs)):
        return f"its {MARKER} has requirements that are not a list of strings"
    for key in ("python", "isolation"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            return f"its {MARKER} has {key} {meta[key]!r}, not a string"
    for key in ("setup_s", "size_bytes"):
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"its {MARKER} has {key} {value!r}, not a number"
    return None


def _entry(venvs: Path, key: str, measure: bool) -> VenvEntry:
    root = venvs / key
    meta: Any = {}
    marker = root / MARKER
    problem = None
    try:
        meta = json.loads(marker.read_text(encoding="utf-8"))
        last_used: float | None = marker.stat().st_mtime
        problem = _marker_problem(meta)
    except (OSError, ValueError, RecursionError) as exc:
        last_used = None
        if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            problem = f"its {MARKER} cannot be read ({type(exc).__name__})"
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        problem = "a link or a file where a venv folder belongs"
    if problem is not None:  # a broken venv: listed as such, and removed as an unfinished build is
        meta, last_used = {}, None
    recorded = meta.get("size_bytes")
    if measure or last_used is None or not isinstance(recorded, int):
        du, frees, newest = _usage(_paths(venvs, key))
        if not measure and last_used is not None:  # a venv built before sizes were recorded: record it once
            _record_size(venvs, key, meta, du)
    else:  # the size recorded at its build: walking every venv after every row would cost seconds
        du, frees, newest = recorded, None, last_used
    in_use = _probe(venvs / f"{key}.lock") or _probe(venvs / f"{key}.use")
    setup = meta.get("setup_s")
    return VenvEntry(key=key, path=root, complete=last_used is not None, in_use=in_use,
                     last_used_s=last_used if last_used is not None else newest, size_bytes=du, frees_bytes=frees,
                     requirements=[str(r) for r in meta.get("requirements") or []], python=meta.get("python"),
                     isolation=meta.get("isolation"),
                     setup_s=float(setup) if isinstance(setup, (int, float)) else None, problem=problem)  # fmt: skip


def list_venvs(home: Path, measure: bool = True) -> list[VenvEntry]:
    """Every environment under ``home/venvs`` (a venv folder, or the lock / log files of one), most recently
    used first; sizes measured now, or with ``measure`` false the sizes recorded when each was built."""
    venvs = venvs_dir(home)
    if not venvs.is_dir():
        return []
    keys = set()
    for p in venvs.iterdir():
        name = p.name
        for suffix in _SUFFIXES:
            name = name.removesuffix(suffix)
        if not name.startswith("."):
            keys.add(name)
    entries = [_entry(venvs, k, measure) for k in sorted(keys)]
    return sorted(entries, key=lambda e: e.last_used_s, reverse=True)


def choose_removals(entries: list[VenvEntry], keep: int, max_bytes: int, older_than_s: float | None,
                    now_s: float, keep_unfinished: bool = False) -> list[VenvEntry]:  # fmt: skip
    """The entries to remove, least recently used last: every unfinished build not in use (with
    ``keep_unfinished``, those are ranked as the others are), then, among the others not in use, those used longer
    than ``older_than_s`` ago and those beyond ``keep`` venvs or ``max_bytes`` bytes once the venvs in use (which
    stay) and the more recently used ones are counted."""
    in_use = [e for e in entries if e.in_use]
    kept_n, kept_bytes = len(in_use), sum(e.size_bytes for e in in_use)
    remove: list[VenvEntry] = []
    for e in sorted(entries, key=lambda e: e.last_used_s, reverse=True):
        if e.in_use:
            continue
        too_old = older_than_s is not None and now_s - e.last_used_s > older_than_s
        if (not e.complete and not keep_unfinished) or too_old or kept_n + 1 > keep \
                or kept_bytes + e.size_bytes > max_bytes:
            remove.append(e)
        else:
            kept_n, kept_bytes = kept_n + 1, kept_bytes + e.size_bytes
    return remove


def _measured(venvs: Path, entry: VenvEntry) -> VenvEntry:
    du, frees = venv_usage(venvs, entry.key)
    return dataclasses.replace(entry, size_bytes=du, frees_bytes=frees)


def _remove(venvs: Path, entry: VenvEntry) -> VenvEntry | None:
    """Remove one environment if no process holds it and it was not used since it was listed; returns it as
    measured just before (None: not removed)."""
    lock = lock_file(venvs / f"{entry.key}.lock", exclusive=True, wait=False)
    if lock is None:
        return None
    with lock:
        use = lock_file(venvs / f"{entry.key}.use", exclusive=True, wait=False)
        if use is None:
            return None
        with use:
            marker = entry.path / MARKER
            try:
                if marker.stat().st_mtime > entry.last_used_s and entry.problem is None:  # used since it was
                    return None  # listed: no longer the least recently used
                entry = _measured(venvs, entry)
                marker.unlink()  # first: a removal cut short leaves an unfinished venv, rebuilt on its next use
            except OSError:  # no marker, or no folder to hold one (a stray file, a link)
                pass
            if entry.path.is_symlink() or (entry.path.exists() and not entry.path.is_dir()):
                entry.path.unlink()  # the link itself, never what it points at
            else:
                shutil.rmtree(entry.path, ignore_errors=True)
            if entry.path.exists() or entry.path.is_symlink():
                return None  # not removed: never reported as removed
            for suffix in (".log", ".use", ".lock"):  # the lock files last, while they are held
                (venvs / f"{entry.key}{suffix}").unlink(missing_ok=True)
    return entry


@dataclass
class PruneResult:
    """What a prune removed (or, dry, would remove), the bytes that freed, and what it kept."""

    removed: list[VenvEntry]
    freed_bytes: int
    kept: list[VenvEntry]
    keep: int
    max_bytes: int
    dry_run: bool = False


def prune_venvs(home: Path, keep: int | None = None, older_than_s: float | None = None, dry_run: bool = False,
                measure: bool = True, keep_unfinished: bool = False) -> PruneResult:  # fmt: skip
    """Remove the environments :func:`choose_removals` picks: ``keep`` defaults to the limit ``venvs_kept``, the
    size bound is ``venvs_bytes`` (sizes measured now, or with ``measure`` false as recorded at each build); a venv
    in use is never removed (nor one used since it was listed). The bytes freed are measured just before.
    ``keep_unfinished``: a failed build (whose log a row's error names) is ranked as the others are."""
    from lmmbench.config.limits import limit_value

    keep = limit_value("venvs_kept") if keep is None else keep
    max_bytes = limit_value("venvs_bytes")
    venvs = venvs_dir(home)
    entries = list_venvs(home, measure)
    chosen = choose_removals(entries, keep, max_bytes, older_than_s, time.time(), keep_unfinished)
    done = [_measured(venvs, e) if dry_run else _remove(venvs, e) for e in chosen]
    removed = [e for e in done if e is not None]
    gone = {e.key for e in removed}
    return PruneResult(removed=removed, freed_bytes=sum(e.frees_bytes or 0 for e in removed),
                       kept=[e for e in entries if e.key not in gone], keep=keep, max_bytes=max_bytes,
                       dry_run=dry_run)  # fmt: skip
