"""Hugging Face hub ids (``ORG/NAME``, optionally ``ORG/NAME@REVISION``) resolved to a local snapshot folder.

Resolution goes through ``huggingface_hub.snapshot_download``, so the local Hugging Face cache is used as the
library uses it: ``HF_HOME`` / ``HF_HUB_CACHE`` say where it is, ``HF_HUB_OFFLINE=1`` reads only the cache, and
online a missing model is downloaded (with the library's progress bar). A model missing from the cache while
offline, or a hub that cannot be reached, is one line naming the id and the cache folder. Every snapshot
resolved in this process is remembered with its commit hash, and the run log records them
(``environment.hub_snapshots``).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["HubSnapshot", "looks_like_hub_id", "resolve_hub_snapshot", "resolved_snapshots", "split_revision"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_RESOLVED: dict[str, HubSnapshot] = {}


@dataclass(frozen=True)
class HubSnapshot:
    """A hub repository as found on disk: its id, the revision asked for, the commit, the folder."""

    repo_id: str
    revision: str | None
    commit: str
    path: str


def split_revision(ref: str) -> tuple[str, str | None]:
    """``ORG/NAME@REV`` -> (``ORG/NAME``, ``REV``); anything else -> (ref, None)."""
    if "@" in ref and not Path(ref).exists():
        repo, _, rev = ref.partition("@")
        return repo, rev or None
    return ref, None


def looks_like_hub_id(ref: str) -> bool:
    """``ORG/NAME`` (or ``ORG/NAME@REV``) that is not an existing local path."""
    repo, _ = split_revision(ref)
    return bool(_HUB_ID.match(repo)) and not Path(ref).expanduser().exists()


def hub_cache_dir() -> str:
    """Where the hub cache is (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return os.path.join(home, "hub")


def resolve_hub_snapshot(ref: str, what: str = "model", allow_patterns: list[str] | None = None) -> HubSnapshot:
    """The local snapshot of hub id ``ref`` (``ORG/NAME[@REV]``), downloaded when online and missing."""
    repo_id, revision = split_revision(ref)
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - tokenizers (a core dependency) brings it
        raise UserError(f"{what} {ref}: hub ids need huggingface_hub: pip install huggingface_hub") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:  # the cache folder and offline mode as the environment says now (the library reads them at import)
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=allow_patterns,
                                   cache_dir=hub_cache_dir(), local_files_only=offline)
    except Exception as exc:  # huggingface_hub raises many kinds; each is one line here
        why = ("not in the local Hugging Face cache and HF_HUB_OFFLINE is set" if offline
               else f"not found in the local cache and the hub could not give it ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:160] if str(exc) else 'no detail'})")  # fmt: skip
        raise UserError(f"{what} {repo_id}{'@' + revision if revision else ''}: {why}; cache folder "
                        f"{hub_cache_dir()} (set HF_HOME or HF_HUB_CACHE to another, or download it there with "
                        f"`hf download {repo_id}`)") from None
    path = Path(folder)
    snap = HubSnapshot(repo_id, revision, path.name, str(path))
    _RESOLVED[f"{repo_id}@{revision or ''}"] = snap
    return snap


def resolved_snapshots() -> list[dict[str, Any]]:
    """Every hub snapshot resolved in this process (id, revision asked for, commit, folder)."""
    return [asdict(s) for s in _RESOLVED.values()]
