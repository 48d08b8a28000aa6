"""Named, versioned prompt templates: ``name@version``, from files or registered in Python, locked by hash.

A prompt is a Jinja2 template (the same language as a task's ``doc_to_text``) with a name and a version.
It comes from a file ``<name>@<version>.<txt|j2|jinja|md>`` in a ``prompts/`` folder beside the file that
references it (a task YAML; the working directory for ``eval --prompt`` and plan rows) or in a folder of
``$LMMBENCH_PROMPT_PATH`` (``:``-separated), else from ``PROMPTS``, the registry Python code fills with
``register_prompt`` (entry-point group ``lmmbench.prompts``). A task file names one with ``prompt: qa@2``.

``prompts.lock`` beside the referencing file maps each ``name@version`` it used to the SHA-256 of the text;
the first use of a version adds it, and a text that no longer matches its locked hash is refused: a changed
prompt needs a new version, so two runs under one ``name@version`` always asked the same thing.
Every run that used a prompt records its name, version and hash in its run log (``config.prompts``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.config.input_files import read_text
from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry

__all__ = ["LOCK_NAME", "PROMPTS", "PROMPT_REF", "Prompt", "check_lock", "parse_ref", "register_prompt",
           "resolve_prompt", "use_prompt"]

PROMPT_REF = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]*)@(?P<version>[A-Za-z0-9][A-Za-z0-9_.-]*)$")
LOCK_NAME = "prompts.lock"
_EXTENSIONS = (".txt", ".j2", ".jinja", ".md")


@dataclass(frozen=True)
class Prompt:
    """One version of a named prompt template."""

    name: str
    version: str
    text: str
    source: str  # the file it was read from, or "python:<module>"

    @property
    def ref(self) -> str:
        """``name@version``."""
        return f"{self.name}@{self.version}"

    @property
    def sha256(self) -> str:
        """The hash of the template's text (UTF-8)."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def record(self) -> dict[str, str]:
        """What a run log keeps of it."""
        return {"ref": self.ref, "name": self.name, "version": self.version, "sha256": self.sha256,
                "source": self.source}  # fmt: skip


PROMPTS: Registry[Prompt] = Registry("prompts")


def parse_ref(ref: str) -> tuple[str, str]:
    """``"qa@2"`` -> ``("qa", "2")``; anything else is a ``UserError``."""
    m = PROMPT_REF.match(ref.strip())
    if m is None:
        raise UserError(f"prompt '{ref}': write it as name@version (letters, digits, _ . -), e.g. qa@1")
    return m["name"], m["version"]


def register_prompt(name: str, version: str, text: str, source: str = "python") -> Prompt:
    """Register a prompt in Python (a name@version registered twice is an error)."""
    parse_ref(f"{name}@{version}")
    return PROMPTS.add(f"{name}@{version}", Prompt(name, version, text, source))


def _folders(base_dir: Path) -> list[Path]:
    extra = [Path(p) for p in os.environ.get("LMMBENCH_PROMPT_PATH", "").split(os.pathsep) if p]
    return [base_dir / "prompts", *extra]


def resolve_prompt(ref: str, base_dir: Path) -> Prompt:
    """The prompt ``ref`` names: a file in ``base_dir/prompts/`` or ``$LMMBENCH_PROMPT_PATH``, else ``PROMPTS``."""
    name, version = parse_ref(ref)
    for folder in _folders(base_dir):
        for ext in _EXTENSIONS:
            path = folder / f"{name}@{version}{ext}"
            if path.is_file():
                return Prompt(name, version, read_text(path, "prompt template"), str(path))
    if f"{name}@{version}" in PROMPTS:
        return PROMPTS.get(f"{name}@{version}")
    known = sorted({p.stem for f in _folders(base_dir) if f.is_dir() for p in f.iterdir() if "@" in p.stem}
                   | set(PROMPTS.names()))  # fmt: skip
    raise UserError(f"prompt '{ref}' not found in {', '.join(str(f) for f in _folders(base_dir))} nor registered "
                    f"in Python (known: {', '.join(known) or 'none'})")


LOCK_VERSION = 1  # the prompt lock format this lmmbench reads and writes


def _read_lock(path: Path) -> dict[str, str]:
    if path.exists() and not path.is_file():
        raise UserError(f"{path}: the prompt lock is not a file (a folder?); remove it or move it away")
    if not path.is_file():
        return {}
    try:
        data = json.loads(read_text(path, "prompt lock file"))
        prompts = data["prompts"]
        if not isinstance(prompts, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{path}: not a prompt lock file (JSON with 'prompts': {{name@version: sha256}})") from None
    version = data.get("version", LOCK_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > LOCK_VERSION:
        raise UserError(f"{path}: prompt lock version {version!r} is newer than this lmmbench reads "
                        f"({LOCK_VERSION}); upgrade lmmbench (the file is left as it is)")  # fmt: skip
    return {str(k): str(v) for k, v in prompts.items()}


def check_lock(prompt: Prompt, lock_path: Path) -> None:
    """Refuse a prompt whose text changed without a new version; lock a version used for the first time."""
    locked = _read_lock(lock_path)
    have = locked.get(prompt.ref)
    if have is None:
        locked[prompt.ref] = prompt.sha256
        body: dict[str, Any] = {"version": LOCK_VERSION, "prompts": dict(sorted(locked.items()))}
        tmp = lock_path.with_suffix(f".tmp{os.getpid()}")  # two runs locking at once never share a file
        try:
            tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
            tmp.replace(lock_path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UserError(f"{lock_path}: cannot write the prompt lock ({exc.strerror or exc}); make the folder "
                            f"writable, or lock {prompt.ref} there once by hand") from None
    elif have != prompt.sha256:
        raise UserError(f"prompt {prompt.ref} ({prompt.source}) changed without a new version: {lock_path} locks "
                        f"sha256 {have[:12]}..., the text now hashes to {prompt.sha256[:12]}...; give the new text "
                        f"a new version (e.g. {prompt.name}@<next>) or restore the old one")


def use_prompt(ref: str, base_dir: Path) -> Prompt:
    """Resolve ``ref`` and check it against ``base_dir/prompts.lock`` (the lock beside the referencing file)."""
    prompt = resolve_prompt(ref, base_dir)
    check_lock(prompt, base_dir / LOCK_NAME)
    return prompt
