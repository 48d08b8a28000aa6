"""Repairs of a synthetic lm-eval document, read from the error a task's own code raised on it.

Used by ``lmeval_coverage.py``. A task's Python or template fails on a guessed row in a few recurring ways; each
failure names what the task wanted, so the row is changed in that one place and the task is built again:

- ``KeyError: 'x'`` on the document: the task reads a field the row lacks: add field ``x``;
- ``ast.literal_eval`` / ``json.loads`` of a field fails: the field holds its list (or mapping) as a string;
- a value looked up in the task's own table (``table[doc["x"]]`` → ``KeyError``, ``choices.index(doc["x"])`` →
  ``'v' is not in list``): the field takes the table's first key / the list's first element, found by evaluating
  the failing line's container expression in the failing frame;
- ``info[k]`` for ``k`` in a literal list of names (``info = doc["f"]``): the field is a mapping with those keys;
- ``field.index(1)`` (a literal) that fails: the list field holds that value first;
- ``.items()`` of a list: the field is a mapping from option letters to its items;
- a column the task's code adds itself (``duplicated columns ['x']``): the row goes without it;
- a list used as a mapping key (``unhashable type: 'list'``): the field (named by the function) is plain text;
- a regular expression applied to a list: the field is its items as one string;
- ``alpha[table[doc["m"][1]["content"]]]``: the inner table's first key, in the list of mappings that holds it;
- ``doc["x"][i]`` with an integer ``i`` on a mapping (``KeyError: 1``): the field is a list;
- ``doc["x"].index("_")`` that finds nothing: the field's text gets the substring the code looks for;
- ``x.format(..)`` of a field holding braces: the field (a format template) keeps no stray braces;
- arithmetic on a string (``answer - 1``): the field is an integer; iteration / ``len`` / ``in`` on an integer: a
  string; ``**`` of a non-mapping: a (JSON) mapping; an index past the end of a list: a longer list.

The field is one the failing line names (``doc["x"]``, or a bare name equal to a field, as in a template).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import traceback
from typing import Any

from lmeval_synthetic_docs import DROP

_FIELD_REF = re.compile(r"""\[\s*["']([^"'\]]+)["']\s*\]""")
_NOT_IN_LIST = re.compile(r"^(.+) is not in list$")
_NO_ELEMENT = re.compile(r"has no element (\d+)")
_PARSE_ERRORS = ("malformed node or string", "Expecting value", "Expecting property name", "the JSON object must be",
                 "invalid syntax", "unterminated string", "Extra data")  # fmt: skip
_ARITH = re.compile(r"unsupported operand type\(s\) for [-+*/%]+: '(str|list)' and '(int|float)'|"
                    r"unsupported operand type\(s\) for [-+*/%]+: '(int|float)' and '(str|list)'|"
                    r"can only concatenate str \(not \"int\"\)|"
                    r"'str' object cannot be interpreted as an integer")  # fmt: skip
_NEEDS_TEXT = re.compile(r"'int' object is not (iterable|subscriptable)|argument of type 'int' is not iterable|"
                         r"object of type 'int' has no len|'int' object has no attribute")  # fmt: skip


def failing_frame(exc: BaseException, templates: str = "") -> tuple[str, dict[str, Any], str] | None:
    """The source line and the variables of the innermost frame of the task's own code; for a template (whose
    line Python cannot show), the task's templates."""
    tb = exc.__traceback__
    found: tuple[str, dict[str, Any], str] | None = None
    while tb is not None:
        frame = tb.tb_frame
        name = frame.f_code.co_filename
        if name == "<template>":
            found = (templates, {}, templates)
        elif "lm_eval/tasks/" in name and not name.endswith("lm_eval/tasks/_factory.py"):
            summary = traceback.extract_tb(tb, limit=1)[0]
            try:
                source = inspect.getsource(frame.f_code)
            except Exception:  # a frame whose module cannot be read back
                source = ""
            found = (summary.line or "", {**frame.f_globals, **frame.f_locals}, source)
        tb = tb.tb_next
    return found


def fields_named(line: str, row: dict[str, Any], scope: dict[str, Any]) -> list[str]:
    """The row's fields a source line names: ``x["f"]`` keys, and bare names equal to a field (a template's
    variables, a local copy of a field)."""
    line = re.split(r"(?<![=!<>])=(?!=)", line, maxsplit=1)[-1] if "\n" not in line else line  # the right side
    out = [f for f in _FIELD_REF.findall(line) if f in row]
    for name in re.findall(r"[A-Za-z_]\w*", line):
        if name in row and name not in out and (name not in scope or scope[name] == row[name]):
            out.append(name)
    return out


def repair(exc: BaseException, row: dict[str, Any], templates: str = "") -> tuple[str, Any] | None:
    """One change to the row (field, new value) that answers ``exc``, or None when the error names none.
    ``templates``: the task's Jinja templates, the line of an error raised while rendering one."""
    where = failing_frame(exc, templates)
    if where is None:
        return None
    line, scope, source = where
    if not scope and source == templates:  # a template reads the row's fields as names
        scope = dict(row)
    text = str(exc.args[0]) if exc.args else str(exc)
    named = fields_named(line, row, scope)
    if any(p in text for p in _PARSE_ERRORS) or type(exc).__name__ == "JSONDecodeError":
        return _first(named, row, lambda v: isinstance(v, (list, dict)), json.dumps)
    if isinstance(exc, (IndexError, KeyError, ValueError)) and ".format(" in line:
        fix = _format_string(line, named, row)
        if fix is not None:
            return fix
    if isinstance(exc, ValueError) and text == "substring not found":
        for name, sub in re.findall(r"""\[["']([^"'\]]+)["']\]\.index\(\s*["']([^"']+)["']""", line):
            if isinstance(row.get(name), str) and sub not in row[name]:
                return name, f"{row[name]} {sub}"
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], int):  # a mapping indexed by position
        fix = _first(named, row, lambda v: isinstance(v, dict), lambda v: ["1", "2", "3", "4"])
        if fix is not None:
            return fix
    if isinstance(exc, KeyError) or "string indices must be integers" in text:
        fix = _nested_key(exc, line, scope, row, source)
        if fix is not None:
            return fix
    if isinstance(exc, TypeError) and "list indices must be integers or slices, not str" in text:
        return _first(named, row, lambda v: isinstance(v, list) and v and all(isinstance(x, str) for x in v),
                      lambda v: {x: x for x in v})  # fmt: skip
    if isinstance(exc, AttributeError) and re.search(r"'list' object has no attribute '(keys|values|items)'", text):
        aliases = re.findall(r"""\b([A-Za-z_]\w*)\s*=\s*\w+\[\s*["']([^"'\]]+)["']\s*\]\s*$""", source, re.M)
        held = [f for v, f in aliases if re.search(rf"\b{v}\.(keys|values|items)\(", line) and f in row]
        return _first(held + named, row, lambda v: isinstance(v, list),
                      lambda v: {chr(65 + i): str(x) for i, x in enumerate(v)})  # fmt: skip
    if isinstance(exc, AttributeError) and re.search(r"'str' object has no attribute '(keys|values|items)'", text):
        return _first(named, row, lambda v: isinstance(v, str), lambda v: {"A": 1, "B": 0})
    if isinstance(exc, KeyError) and isinstance(exc.args[0] if exc.args else None, str):
        fix = _sibling_key(row, exc.args[0])
        if fix is not None:
            return fix
    arrow = type(exc).__name__ == "ArrowInvalid"
    if arrow and "cannot mix list and non-list" in text:
        return _first(list(row), row, lambda v: isinstance(v, list), lambda v: str(v[0]) if v else "1")
    m = re.search(r"Could not convert '?(.*?)'? with type str: tried to convert to int", text) if arrow else None
    if m:
        return _first(list(row), row, lambda v: v == m.group(1), lambda v: int(v) if v.isdigit() else 0)
    if isinstance(exc, ValueError) and _NOT_IN_LIST.match(text):
        fix = _index_of_literal(line, row)
        if fix is not None:
            return fix
    if isinstance(exc, (KeyError, ValueError)):
        wanted = text if isinstance(exc, KeyError) else _not_in_list(text)
        if wanted is not None:
            fix = _from_container(line, scope, named, row, wanted)
            if fix is not None:
                return fix
    if isinstance(exc, TypeError) and _ARITH.search(text):
        near = [n for n in named if re.search(rf"(\b{re.escape(n)}\b|\[[\"']{re.escape(n)}[\"']\])\s*[-+*/%]\s*\d|"
                                             rf"\d\s*[-+*/%]\s*\b{re.escape(n)}\b", line)]  # fmt: skip
        return _first(near or named, row, lambda v: isinstance(v, str), lambda v: int(v) if str(v).isdigit() else 1)
    if isinstance(exc, TypeError) and re.search(r"expected string or bytes-like object, got '(list|dict)'", text):
        return _first(named, row, lambda v: isinstance(v, (list, dict)),
                      lambda v: ", ".join(map(str, v.values() if isinstance(v, dict) else v)))  # fmt: skip
    m = re.search(r"can't have duplicated columns but columns \['([^']+)'\] are duplicated", text)
    if m and m.group(1) in row:  # the task's code adds that column itself: the stored row lacks it
        return m.group(1), DROP
    if isinstance(exc, TypeError) and "unhashable type: 'list'" in text:  # a value used as a key: plain text
        in_source = [f for f in dict.fromkeys(_FIELD_REF.findall(source)) if f in row]
        return _first(named + in_source, row, lambda v: isinstance(v, list) and v and not isinstance(v[0], list),
                      lambda v: str(v[0]))  # fmt: skip
    if isinstance(exc, TypeError) and _NEEDS_TEXT.search(text):
        return _first(named, row, lambda v: isinstance(v, int), lambda v: "1")
    if isinstance(exc, TypeError) and "must be a mapping" in text:
        starred = [n for n in named if re.search(rf"""\*\*\s*(?:[\w.]+\()?\w+\[["']{re.escape(n)}["']""", line)]
        mapping: Any = "{}" if "json" in line else {}
        return _first(starred or named, row, lambda v: not isinstance(v, dict), lambda v: mapping)
    m = _NO_ELEMENT.search(text)
    if m or (isinstance(exc, IndexError) and "list index out of range" in text):
        grown = _grow(named, row, int(m.group(1)) + 1 if m else 8)
        if grown is None and ".keys()" in line:  # a key other than the ones the task names
            return _first(named, row, lambda v: isinstance(v, dict) and "other" not in v, lambda v: {**v, "other": "1"})
        return grown
    return None


def _nested_key(exc: BaseException, line: str, scope: dict[str, Any], row: dict[str, Any],
                source: str) -> tuple[str, Any] | None:  # fmt: skip
    """``v["k"]`` failed where ``v`` holds (an item of) a field: that field becomes a mapping (a list of
    mappings) with the keys the line reads from ``v``. ``v`` is found by the source (``v = doc["f"]``,
    ``for v in doc["f"]``, ``doc["f"][0]["k"]``) or else by its value."""
    for field in re.findall(r"""\[\s*["']([^"'\]]+)["']\s*\]\s*\[\s*\d+\s*\]\s*\[\s*["']""", line):
        held = row.get(field)
        if field in row and (not isinstance(held, list) or (held and not isinstance(held[0], dict))):
            keys = re.findall(rf"""\[["']{re.escape(field)}["']\]\s*\[\s*\d+\s*\]\s*\[\s*["']([^"'\]]+)["']""", line)
            return field, [{k: "1" for k in keys}] * 4
    aliases = dict(re.findall(r"""\b([A-Za-z_]\w*)\s*=\s*\w+\[\s*["']([^"'\]]+)["']\s*\]\s*$""", source, re.M))
    fix = _keyed_by_loop(line, source, aliases, row)
    if fix is not None:
        return fix
    loops = dict(re.findall(r"""for\s+([A-Za-z_]\w*)\s+in\s+([A-Za-z_]\w*)\s*:""", source))
    loops.update(re.findall(r"""for\s+([A-Za-z_]\w*)\s+in\s+\w+\[\s*["']([^"'\]]+)["']\s*\]""", source))
    for var, _key in re.findall(r"""\b([A-Za-z_]\w*)\[\s*["']([^"'\]]+)["']\s*\]""", line):
        keys = {k: "1" for k in re.findall(rf"""\b{var}\[\s*["']([^"'\]]+)["']""", line)}
        over = aliases.get(loops[var], loops[var]) if var in loops else None
        if over in row and not (isinstance(row[over], list) and row[over] and isinstance(row[over][0], dict)):
            return over, [keys] * 2
        if aliases.get(var) in row and not isinstance(row[aliases[var]], dict):
            return aliases[var], keys
    for var, key in re.findall(r"""\b([A-Za-z_]\w*)\[\s*["']([^"'\]]+)["']\s*\]""", line):
        value = scope.get(var)
        if isinstance(exc, KeyError) and str(exc.args[0] if exc.args else "") != key:
            continue
        lists_in_scope = [v for v in scope.values() if isinstance(v, list)]
        ranked = sorted(row.items(), key=lambda kv: not any(kv[1] == v for v in lists_in_scope))
        for name, held in ranked:
            if isinstance(held, list) and value is not None and value in held and not isinstance(value, dict):
                keys = re.findall(rf"""\b{var}\[\s*["']([^"'\]]+)["']""", line)
                return name, [{k: "1" for k in keys}] * len(held)
            if held == value and isinstance(held, (dict, str)) and held is not row:
                base = held if isinstance(held, dict) else {}
                many = re.search(rf"""\b{var}\[\s*["']{re.escape(key)}["']\s*\]\s*\[""", line)
                return name, {**base, key: ["1", "2", "3", "4"] if many else "1"}
    return None


def _format_string(line: str, named: list[str], row: dict[str, Any]) -> tuple[str, Any] | None:
    """``x.format(..)`` failed where ``x`` is a field holding ``{..}`` (a filling with ``\\boxed{1}``): the field
    is a format template, so its text keeps no stray braces."""
    for name in named:
        value = row[name]
        used = re.search(rf"""(\b{re.escape(name)}\b|\[["']{re.escape(name)}["']\])\s*\.format\(""", line)
        if used and isinstance(value, str) and ("{" in value or "}" in value):
            return name, value.replace("{", "").replace("}", "")
    return None


def _keyed_by_loop(line: str, source: str, aliases: dict[str, str], row: dict[str, Any]) -> tuple[str, Any] | None:
    """``info[ans]`` inside ``for ans in ["ans0", "ans1"]`` where ``info = doc["f"]``: field ``f`` is a mapping
    with those keys (each a short list of strings)."""
    loops = {v: items for v, items in re.findall(r"""for\s+(\w+)\s+in\s+(\[[^\]]*\]|\([^)]*\))\s*:""", source)}
    for var, index in re.findall(r"""\b([A-Za-z_]\w*)\[\s*([A-Za-z_]\w*)\s*\]""", line):
        field = aliases.get(var, var if var in row else None)
        if index not in loops or field not in row or isinstance(row[field], dict):
            continue
        try:
            keys = ast.literal_eval(loops[index])
        except (ValueError, SyntaxError):
            continue
        if keys and all(isinstance(k, str) for k in keys):
            return field, {k: ["1", "2"] for k in keys}
    return None


def _grow(named: list[str], row: dict[str, Any], size: int) -> tuple[str, Any] | None:
    """A list the line indexes past its end (a field, or a list inside a mapping field) made ``size`` long."""

    def longer(v: list[Any]) -> list[Any]:
        return ((v or ["1"]) * size)[:size]

    for name in named:
        value = row[name]
        if isinstance(value, list) and len(value) < size:
            return name, longer(value)
        if isinstance(value, dict):
            short = {k: longer(v) for k, v in value.items() if isinstance(v, list) and len(v) < size}
            if short:
                return name, {**value, **short}
    return None


def _sibling_key(row: dict[str, Any], key: str) -> tuple[str, Any] | None:
    """``KeyError: 'a2'`` where a mapping inside a field has ``a1``: that mapping gets ``a2`` (the same value)."""
    import copy

    stem = re.sub(r"\d+", "", key)

    def add(value: Any) -> bool:
        if isinstance(value, dict):
            sib = next((k for k in value if k != key and re.sub(r"\d+", "", k) == stem), None)
            if sib is not None and key not in value:
                value[key] = copy.deepcopy(value[sib])
                return True
            return any([add(v) for v in value.values()])  # every mapping of that shape
        return False

    for name, value in row.items():
        new = copy.deepcopy(value)
        if add(new):
            return name, new
    return None


def _first(named: list[str], row: dict[str, Any], when: Any, make: Any) -> tuple[str, Any] | None:
    for name in named:
        if when(row[name]):
            return name, make(row[name])
    return None


def _not_in_list(text: str) -> str | None:
    m = _NOT_IN_LIST.match(text)
    if not m:
        return None
    try:
        return str(ast.literal_eval(m.group(1)))
    except (ValueError, SyntaxError):
        return m.group(1)


def _from_container(line: str, scope: dict[str, Any], named: list[str], row: dict[str, Any],
                    wanted: str) -> tuple[str, Any] | None:  # fmt: skip
    """``table[doc["x"]]`` or ``choices.index(doc["x"])`` failed for the row's value: take the container's first
    key / element for the field holding that value (or a list of them, for a list field iterated in the line)."""
    candidate = _container_value(line, scope, wanted)
    if candidate is _NONE:
        return None
    holders = [n for n in named if _holds(row[n], wanted)] or [n for n in row if _holds(row[n], wanted)]
    for name, value in row.items():  # a key of a mapping field that the task looks up in its table
        if isinstance(value, dict) and wanted in value and candidate not in value:
            return name, {(candidate if k == wanted else k): v for k, v in value.items()}
    for name in named:  # a value inside a list of mappings (doc["messages"][1]["content"])
        value = row[name]
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            new_list = [{k: (candidate if str(x) == wanted else x) for k, x in v.items()} for v in value]
            if new_list != value:
                return name, new_list
    for name in holders:
        value = row[name]
        iterated = re.search(rf"""for\s+\w+\s+in\s+\w+\[["']{re.escape(name)}["']\]""", line)
        as_list = (isinstance(value, list) and str(value) != wanted) or iterated  # a whole list looked up: a value
        new = [candidate] * max(len(value), 1) if as_list else candidate
        if new != value:
            return name, new
    return None


def _index_of_literal(line: str, row: dict[str, Any]) -> tuple[str, Any] | None:
    """``field.index(1)`` (a literal) failed: the list field holds that value first (``[1, 0, 0, 0]``)."""
    for name, arg in re.findall(r"""\b(\w+)\.index\(\s*([^()]+?)\s*\)""", line):
        try:
            lit = ast.literal_eval(arg)
        except (ValueError, SyntaxError):
            continue
        value = row.get(name)
        if isinstance(value, list) and lit not in value and isinstance(lit, (int, str)):
            rest = [0 if lit != 0 else 1] if isinstance(lit, int) else [str(v) for v in value[1:]] or ["1"]
            return name, [lit, *(rest * max(len(value) - 1, 1))[:max(len(value) - 1, 1)]]
    return None


def _holds(value: Any, wanted: str) -> bool:
    if isinstance(value, list) and str(value) != wanted:
        return any(str(v) == wanted for v in value)
    return str(value) == wanted


_NONE = object()


def _container_value(line: str, scope: dict[str, Any], wanted: str | None = None) -> Any:
    """The first key (mapping) or element (list) of a container the line subscripts or calls ``.index`` on (in
    templates: of each ``{{ expression }}``)."""
    if "{{" in line:
        for expr in re.findall(r"\{\{(.*?)\}\}", line, re.S):
            found = _container_value(expr.strip(), scope, wanted)
            if found is not _NONE:
                return found
        return _NONE
    tree = _parse_line(line)
    if tree is None:
        return _NONE
    first: Any = _NONE
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "index":
            target = node.func.value
        if target is None or not _plain(target):
            continue
        try:
            container = eval(compile(ast.Expression(target), "<line>", "eval"), {"__builtins__": {}}, scope)
        except Exception:
            continue
        if isinstance(container, dict) and container:
            if wanted is not None and wanted in container and first is _NONE:  # not the table that refused it
                first = next(iter(container))
                continue
            return next(iter(container))
        if isinstance(container, (list, tuple)) and container and not isinstance(container[0], (dict, list)):
            inner = wanted is not None and isinstance(node, ast.Subscript) and _dict_inside(node, scope)
            if inner and first is _NONE:  # alpha[table[x]]: the table inside refused x, not the list outside
                first = container[0]
                continue
            return container[0]
    return first


def _dict_inside(node: ast.Subscript, scope: dict[str, Any]) -> bool:
    """The subscript's index looks a value up in a mapping of the scope (``alpha[table[x]]``)."""
    for sub in ast.walk(node.slice):
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) \
                and isinstance(scope.get(sub.value.id), dict):
            return True
    return False


def _parse_line(line: str) -> ast.AST | None:
    """One source line as an expression: without ``return`` / ``x =`` / ``"key":`` before it, a trailing ``,``."""
    text = line.strip().rstrip(",:(").removeprefix("return ").removeprefix("{{").removesuffix("}}").strip()
    text = re.sub(r"""^(?:[\w.\[\]"']+\s*[-+]?=(?!=)|["'][^"']*["']\s*:)\s*""", "", text)
    for attempt in (text, f"({text})", text.split(" for ")[0].lstrip("[(")):
        try:
            return ast.parse(attempt, mode="eval")
        except SyntaxError:
            continue
    return None


def _plain(node: ast.AST) -> bool:
    """A name, an attribute of one, or a literal: safe to evaluate (no call)."""
    return all(isinstance(n, (ast.Name, ast.Attribute, ast.Load, ast.List, ast.Tuple, ast.Dict, ast.Constant))
               for n in ast.walk(node))  # fmt: skip
