"""Chat templates from a tokenizer folder, found where transformers looks and rendered in jinja2's sandbox.

A tokenizer is something users download, and its chat template is code: transformers renders it in jinja2's
``ImmutableSandboxedEnvironment`` and so does lmmbench (both drop-ins). The template is looked up as
transformers 5 loads it: ``chat_template.jinja`` first (it takes priority over the config's entry), then
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates: the ``default`` one), then a
processor's ``chat_template.json``. A template the sandbox refuses (``jinja2.exceptions.SecurityError``) is one
line naming the file, exit 2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["ChatTemplate", "find_chat_template", "read_json_object", "sandboxed_environment"]


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` ({} when the file is absent); a file that is not a JSON object is refused by name."""
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON ({exc}); fix or remove the file") from None
    if not isinstance(found, dict):
        raise UserError(f"{path}: expected a JSON object, found {type(found).__name__}")
    return found


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template's text and the file it came from."""

    text: str
    source: Path

    def render(self, **context: Any) -> str:
        """The template rendered with ``context`` in the sandbox; a sandbox refusal is a ``UserError`` naming the
        file. Other template errors (``raise_exception``, a missing variable) propagate as jinja2's own."""
        from jinja2.exceptions import SecurityError

        try:
            return str(_compiled(self.text).render(**context))
        except SecurityError as exc:
            raise UserError(f"{self.source}: the chat template does something jinja2's sandbox refuses ({exc}); "
                            "a chat template may only format the messages") from None  # fmt: skip


@lru_cache(maxsize=8)
def _compiled(text: str) -> Any:
    return sandboxed_environment().from_string(text)


def _named_default(template: Any) -> Any:
    if isinstance(template, list):  # named templates: the default one
        return next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                    None)  # fmt: skip
    return template


def find_chat_template(folder: Path, config: dict[str, Any] | None = None) -> ChatTemplate | None:
    """The chat template of the tokenizer in ``folder`` (``config``: its ``tokenizer_config.json`` when already
    read), in transformers' order; None when there is none."""
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return ChatTemplate(jinja_file.read_text(encoding="utf-8"), jinja_file)
    config_file = folder / "tokenizer_config.json"
    found = _named_default((read_json_object(config_file) if config is None else config).get("chat_template"))
    if isinstance(found, str) and found:
        return ChatTemplate(found, config_file)
    processor_file = folder / "chat_template.json"
    found = _named_default(read_json_object(processor_file).get("chat_template"))
    return ChatTemplate(found, processor_file) if isinstance(found, str) and found else None


def _raise(message: str) -> None:
    import jinja2

    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    """transformers' ``tojson`` filter of chat templates (plain ``json.dumps``, no HTML escaping)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def sandboxed_environment() -> Any:
    """jinja2's ``ImmutableSandboxedEnvironment`` set up as transformers sets it up for chat templates
    (``trim_blocks``, ``lstrip_blocks``, loop controls, ``raise_exception``, ``tojson``, ``strftime_now``)."""
    try:
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise UserError("applying a chat template needs jinja2: pip install jinja2") from None
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env
