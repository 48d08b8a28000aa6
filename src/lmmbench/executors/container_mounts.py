"""Host paths inside a container row (the orchestration design's ``mount_data``): the row's ``mounts`` and the
paths its options name.

- A ``mounts`` entry is ``HOST[:CONTAINER][:ro|:rw]``: the host path (relative to the driver's working
  folder) at ``CONTAINER`` (default: the same path), read-only unless ``:rw``. A missing host path, a relative
  container path or a mode other than ``ro`` / ``rw`` is refused when the plan is validated.
- Every option value (also inside lists and mappings) that names an existing host file or folder — an
  absolute path, one with a ``/``, or any existing name in a field typed as a path — is rewritten to
  ``/lmmbench/host<absolute host path>``, where the folder (a file's folder: the data and includes a task
  file names beside it) is mounted read-only. A path under the row folder,
  ``$LMMBENCH_HOME`` or a ``mounts`` entry is rewritten to where that mount is instead. A ``command`` row's
  command line is text: paths in it are not rewritten (mount them with ``mounts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["HOST_MOUNT", "Mount", "check_mounts", "container_paths", "host_path", "parse_mount"]

HOST_MOUNT = "/lmmbench/host"  # where a host path an option names appears: /lmmbench/host/<absolute path>
_MODES = ("ro", "rw")
_TEXT_FIELDS = ("command", "url", "run_name", "name", "served_model")  # never paths, whatever they contain


@dataclass(frozen=True)
class Mount:
    """A bind mount: the host path, where it is in the container, and whether it is read-only."""

    host: Path
    container: str
    read_only: bool = True

    def flag(self) -> str:
        """The engine's ``-v`` value."""
        return f"{self.host}:{self.container}:{'ro' if self.read_only else 'rw'}"


def parse_mount(text: str) -> Mount:
    """``HOST[:CONTAINER][:ro|:rw]`` -> a ``Mount`` (the host path made absolute; it must exist)."""
    parts = text.split(":")
    mode = "ro"
    if len(parts) > 1 and parts[-1] in _MODES:
        mode = parts.pop()
    if not parts[0] or len(parts) > 2:
        raise UserError(f"mounts: '{text}': expected HOST[:CONTAINER][:ro|:rw] (a path holds no ':')")
    host = Path(parts[0]).expanduser().absolute()
    container = parts[1] if len(parts) == 2 else str(host)
    if not PurePosixPath(container).is_absolute():
        raise UserError(f"mounts: '{text}': the container path '{container}' must be absolute")
    if not host.exists():
        raise UserError(f"mounts: '{text}': the host path {host} does not exist; create it or fix the path")
    return Mount(host, container, mode == "ro")


def check_mounts(entries: list[str]) -> list[Mount]:
    """Every ``mounts`` entry parsed (``UserError`` naming the first bad one); two at one container path refused."""
    mounts = [parse_mount(e) for e in entries]
    seen: dict[str, str] = {}
    for entry, m in zip(entries, mounts, strict=True):
        if m.container in seen:
            raise UserError(f"mounts: '{entry}' and '{seen[m.container]}' both mount at {m.container}")
        seen[m.container] = entry
    return mounts


def _inside(path: Path, mounts: list[Mount]) -> str | None:
    """``path`` as the container sees it through one of ``mounts`` (the deepest that holds it), else None."""
    best: Mount | None = None
    for m in mounts:
        if (path == m.host or m.host in path.parents) and (best is None or len(m.host.parts) > len(best.host.parts)):
            best = m
    if best is None:
        return None
    return str(PurePosixPath(best.container) / path.relative_to(best.host))


def _as_host_path(value: str, typed_path: bool) -> Path | None:
    """The existing host path ``value`` names, or None (a bare word is a path only in a field typed as one)."""
    if not value or "\n" in value or "://" in value or len(value) > 4096:
        return None
    if not (typed_path or value.startswith(("/", "~", ".")) or "/" in value):
        return None
    path = Path(value).expanduser()
    try:
        return path.absolute() if path.exists() else None
    except OSError:
        return None


def host_path(path: str, mounts: list[Mount]) -> str:
    """A path the container wrote (a row's ``folder``) as the host sees it, through the mount that holds it (the
    deepest); ``path`` unchanged when no mount holds it."""
    inside = PurePosixPath(path)
    best: Mount | None = None
    for m in mounts:
        ctr = PurePosixPath(m.container)
        if (inside == ctr or ctr in inside.parents) and (best is None or len(ctr.parts) > len(
                PurePosixPath(best.container).parts)):  # fmt: skip
            best = m
    if best is None:
        return path
    return str(best.host / inside.relative_to(PurePosixPath(best.container)))


def container_paths(config: dict[str, Any], fixed: list[Mount], path_fields: set[str],
                    writable: Path | None = None) -> tuple[dict[str, Any], list[Mount]]:
    """``config`` with every host path its values name rewritten to where the container sees it, and the mounts
    added for the paths no mount in ``fixed`` (row folder, home, the row's ``mounts``) holds: read-only, except
    under ``writable`` (the plan's folder: another row's folder handed off, which a scoring row writes into)."""
    added: list[Mount] = []

    def rewrite(value: Any, typed: bool) -> Any:
        if isinstance(value, list):
            return [rewrite(v, typed) for v in value]
        if isinstance(value, dict):
            return {k: rewrite(v, k in path_fields) for k, v in value.items()}
        if not isinstance(value, str) or (path := _as_host_path(value, typed)) is None:
            return value
        inside = _inside(path, [*fixed, *added])
        if inside is None:  # a file goes with its folder: a task's data file, an include, beside it
            folder = path.parent if path.is_file() and path.parent != Path(path.anchor) else path
            added[:] = [m for m in added if not (m.host == folder or folder in m.host.parents)]  # now inside it
            rw = writable is not None and (folder == writable or writable in folder.parents)
            added.append(Mount(folder, HOST_MOUNT + str(folder), read_only=not rw))
            inside = HOST_MOUNT + str(path)
        return inside

    out = {k: v if k in _TEXT_FIELDS else rewrite(v, k in path_fields) for k, v in config.items()}
    return out, added
