"""The one placeholder formatter of every command line lmmbench fills.

A template names fields in braces: ``{port}``, ``{model}``, ``{rows.infer.folder}``. A placeholder is a brace,
a dotted name (``[A-Za-z_][A-Za-z0-9_]*`` then ``.part`` segments of ``[A-Za-z0-9_-]``) and a closing brace;
every other brace is text and stays as written: JSON (``{"temperature": 0}``), ``{}``, a shell's ``${HOME}``,
``{a,b}``. ``{{name}}`` is the text ``{name}``. ``{name`` left open, where ``name`` is a field of the context,
is refused (a typo, not text).

Each caller builds its ``Fields``: the values it knows now, the names known only later (checked now, filled
then, e.g. a row's folder once that row ended) and the names that exist elsewhere but not here, each with its
reason (``{model}`` in a row without ``model:``). An unknown or unavailable name is refused before anything
runs, naming it and the fields there are.

What is substituted is never re-read by a shell or a splitter: ``fill_argv`` splits the template first and
puts each value whole into its argument; ``fill_shell`` quotes each value for ``/bin/sh``; ``fill_text`` pastes
values as they are (an option's value, not a command line).
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lmmbench.core.errors import UserError

__all__ = ["Fields", "check", "fill_argv", "fill_shell", "fill_text", "names_in", "shell_syntax"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*"
_ESCAPED = re.compile(r"\{\{(" + _NAME + r")\}\}")
_PLACEHOLDER = re.compile(r"(?<![$\{])\{(" + _NAME + r")\}")
_OPEN = re.compile(r"(?<![$\{])\{(" + _NAME + r")(?![A-Za-z0-9_.}-])")
_SENTINEL = "\x00lmmbench-brace\x00"


@dataclass(frozen=True)
class Fields:
    """The fields of one context: ``values`` known now, ``later`` known once something ran (accepted by
    ``check``, refused by a fill), ``unavailable`` (name -> why it is not there), ``where`` (for messages)."""

    where: str
    values: Mapping[str, str] = field(default_factory=dict)
    later: frozenset[str] = frozenset()
    unavailable: Mapping[str, str] = field(default_factory=dict)

    def known(self) -> list[str]:
        """Every name a template may use here, sorted."""
        return sorted({*self.values, *self.later})

    def with_values(self, **values: str) -> Fields:
        """These fields with more values (names of ``later`` filled in)."""
        later = self.later - values.keys()
        return Fields(self.where, {**self.values, **values}, frozenset(later), self.unavailable)


def _listing(fields: Fields) -> str:
    known = fields.known()
    return ", ".join("{" + n + "}" for n in known) if known else "none"


def names_in(template: str) -> list[str]:
    """The placeholder names of ``template`` in order (escaped ``{{name}}`` and non-placeholder braces left out)."""
    return [m.group(1) for m in _PLACEHOLDER.finditer(_ESCAPED.sub("", template))]


def check(template: str, fields: Fields) -> None:
    """Refuse (``UserError``) a placeholder that names no field of ``fields`` or one not available there, and a
    field's placeholder left open (``{port`` with no ``}``)."""
    text = _ESCAPED.sub("", template)
    for name in names_in(template):
        if name in fields.values or name in fields.later:
            continue
        if name in fields.unavailable:
            raise UserError(f"{fields.where}: {{{name}}} is not available here: {fields.unavailable[name]}")
        close = difflib.get_close_matches(name, fields.known(), n=1)
        hint = f" (did you mean {{{close[0]}}}?)" if close else ""
        raise UserError(f"{fields.where}: {{{name}}} is not a field here{hint}; the fields are {_listing(fields)} "
                        f"(write {{{{{name}}}}} for the text {{{name}}})")
    for m in _OPEN.finditer(text):
        if m.group(1) in fields.values or m.group(1) in fields.later or m.group(1) in fields.unavailable:
            raise UserError(f"{fields.where}: '{{{m.group(1)}' is not closed; write {{{m.group(1)}}}")


def _fill(template: str, fields: Fields, convert: Callable[[str], str]) -> str:
    check(template, fields)
    pending = [n for n in names_in(template) if n not in fields.values]
    if pending:
        raise UserError(f"{fields.where}: {{{pending[0]}}} is not known yet")
    escaped: list[str] = []

    def keep(m: re.Match[str]) -> str:
        escaped.append("{" + m.group(1) + "}")
        return f"{_SENTINEL}{len(escaped) - 1}{_SENTINEL}"

    text = _ESCAPED.sub(keep, template)
    text = _PLACEHOLDER.sub(lambda m: convert(fields.values[m.group(1)]), text)
    return re.sub(re.escape(_SENTINEL) + r"(\d+)" + re.escape(_SENTINEL), lambda m: escaped[int(m.group(1))], text)


def fill_text(template: str, fields: Fields) -> str:
    """``template`` with its placeholders replaced by the values as they are (an option's value)."""
    return _fill(template, fields, str)


def fill_shell(template: str, fields: Fields) -> str:
    """``template`` with each value quoted for ``/bin/sh`` (``shlex.quote``): a value is one word whatever it
    holds (spaces, quotes, ``;``)."""
    return _fill(template, fields, shlex.quote)


def fill_argv(template: str, fields: Fields) -> list[str]:
    """``template`` split into arguments as a shell would (``shlex.split``), then each argument filled: a value
    lands whole inside the argument that named it, never split or re-read."""
    check(template, fields)
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise UserError(f"{fields.where}: cannot split the command line: {exc}") from None
    if not words:
        raise UserError(f"{fields.where}: the command line is empty")
    return [_fill(w, fields, str) for w in words]


_OPERATORS = ("&&", "||", ">>", "|", ";", ">", "<", "&")


def shell_syntax(line: str) -> str | None:
    """The first piece of shell syntax in ``line`` that only a shell gives meaning to (a pipe, a redirection,
    ``;``, ``&&``, ``$VAR`` / ``$(...)`` / backticks, a ``*`` glob), outside quotes that keep it text; None
    when the line means the same without a shell."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1
        elif quote == '"' and c == '"':
            quote = ""
        elif c in "$`" and (c == "`" or re.match(r"\$[A-Za-z_({]", line[i:i + 2])):
            return line[i:i + 2] if c == "$" else "`"
        elif not quote and c in "'\"":
            quote = c
        elif not quote:
            op = next((o for o in _OPERATORS if line.startswith(o, i)), None)
            if op is not None:
                return op
            if c == "*":
                return "*"
        i += 1
    return None
