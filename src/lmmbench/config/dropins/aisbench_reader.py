"""AISBench's Python config files read without running them.

AISBench (``ais_bench/benchmark/cli/config_manager.py``) loads its config files with mmengine's
``Config.fromfile``, which executes them. lmmbench reads them with :mod:`ast` instead and accepts only what the
shipped model and data set configs use: ``from X import NAME`` (kept as an :class:`ImportedName`, which the
caller maps to one of lmmbench's behaviours by name), module-level ``NAME = value`` assignments, ``dict(...)``
calls with keyword arguments, list / tuple / dict / string / number / bool / None literals, names of earlier
variables, and ``with read_base():`` blocks importing variables of sibling config files (mmengine's
inheritance); and, because AISBench's demo configs (``configs/datasets/demo/``) adjust an inherited data set that
way, ``NAME[k]...[k] = value`` with constant keys, ``NAME[k]...`` reads and ``+`` of two strings or two lists.
Anything else (a loop, a function call other than ``dict``, other arithmetic, ``locals()``) is refused naming the
file and line, and the file is never run.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["ImportedName", "read_config_file"]

#: how deep ``read_base()`` may chain (a loop of files is refused before it)
_MAX_DEPTH = 16


@dataclass(frozen=True)
class ImportedName:
    """A name a config file imports (``from module import name``), where it was imported."""

    module: str
    name: str
    file: str
    line: int

    @property
    def dotted(self) -> str:
        """``module.name`` as written in the import."""
        return f"{self.module}.{self.name}"


class _Refused(Exception):
    def __init__(self, node: ast.AST, what: str) -> None:
        super().__init__(what)
        self.line = int(getattr(node, "lineno", 0))
        self.what = what


def read_config_file(path: Path, package_root: Path | None = None) -> dict[str, Any]:
    """The module-level variables of the AISBench config file ``path`` (imports kept as
    :class:`ImportedName`). ``package_root`` is the folder holding the ``ais_bench`` package, where an absolute
    ``read_base()`` import (``from ais_bench.datasets.x import y``) is looked up."""
    return _Reader(package_root).read(Path(path).resolve(), ())


class _Reader:
    def __init__(self, package_root: Path | None) -> None:
        self.package_root = package_root

    def read(self, path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
        from lmmbench.config.input_files import read_text

        if path in chain:
            raise UserError(f"{chain[-1]}: read_base() imports {path}, which imports it back (a loop)")
        if len(chain) > _MAX_DEPTH:
            raise UserError(f"{path}: read_base() nested deeper than {_MAX_DEPTH} files")
        text = read_text(path, "AISBench config file")
        try:
            tree = ast.parse(text, filename=str(path))
        except SyntaxError as exc:
            raise UserError(f"{path}:{exc.lineno}: not valid Python ({exc.msg})") from None
        names: dict[str, Any] = {}
        try:
            for stmt in tree.body:
                self._statement(stmt, path, names, (*chain, path))
        except _Refused as exc:
            raise UserError(f"{path}:{exc.line}: {exc.what}; lmmbench reads AISBench config files without running "
                            "them (imports, NAME = dict(...) / literals, read_base())") from None
        return names

    def _statement(self, stmt: ast.stmt, path: Path, names: dict[str, Any], chain: tuple[Path, ...]) -> None:
        if isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                raise _Refused(stmt, "a relative import outside `with read_base():`")
            for alias in stmt.names:
                if alias.name == "*":
                    raise _Refused(stmt, f"`from {stmt.module} import *`")
                names[alias.asname or alias.name] = ImportedName(str(stmt.module), alias.name, str(path), stmt.lineno)
        elif isinstance(stmt, ast.With):
            self._read_base(stmt, path, names, chain)
        elif isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise _Refused(stmt, "a chained assignment (a = b = ...)")
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                names[target.id] = _value(stmt.value, names)
            elif isinstance(target, ast.Subscript):  # x[0]['abbr'] = ... (AISBench's demo configs)
                container, key = _item_target(target, names)
                container[key] = _value(stmt.value, names)
            else:
                raise _Refused(stmt, "an assignment to something other than a name or name[key]...")
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            names[stmt.target.id] = _value(stmt.value, names)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return  # a docstring
        elif isinstance(stmt, ast.Pass):
            return
        else:
            raise _Refused(stmt, f"a `{type(stmt).__name__}` statement")

    def _read_base(self, stmt: ast.With, path: Path, names: dict[str, Any], chain: tuple[Path, ...]) -> None:
        item = stmt.items[0].context_expr if len(stmt.items) == 1 else None
        if not (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "read_base"
                and not item.args and not item.keywords and isinstance(names.get("read_base"), ImportedName)):
            raise _Refused(stmt, "a `with` block other than `with read_base():` (from mmengine.config)")
        for sub in stmt.body:
            if not isinstance(sub, ast.ImportFrom):
                raise _Refused(sub, "something other than `from .file import NAME` inside read_base()")
            base = self._base_file(sub, path)
            values = self.read(base, chain)
            for alias in sub.names:
                if alias.name == "*":
                    names.update({k: v for k, v in values.items() if not k.startswith("_")})
                    continue
                if alias.name not in values:
                    raise _Refused(sub, f"{base} has no variable '{alias.name}'")
                names[alias.asname or alias.name] = values[alias.name]

    def _base_file(self, node: ast.ImportFrom, path: Path) -> Path:
        parts = (node.module or "").split(".")
        if node.level:
            folder = path.parent
            for _ in range(node.level - 1):
                folder = folder.parent
        elif self.package_root is not None:
            folder = self.package_root
        else:
            raise _Refused(node, f"read_base() imports {node.module} from an AISBench installation: give "
                                 "--aisbench-root (the folder holding the ais_bench package)")  # fmt: skip
        target = folder.joinpath(*parts).with_suffix(".py") if parts != [""] else folder / "__init__.py"
        if not target.is_file():
            raise _Refused(node, f"read_base() imports {'.' * node.level}{node.module}: no file {target}")
        return target


_LITERALS = (str, int, float, bool, type(None))


def _value(node: ast.expr, names: dict[str, Any]) -> Any:
    """The value of an expression of the accepted kinds; ``_Refused`` for anything else."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, _LITERALS):
            raise _Refused(node, f"a {type(node.value).__name__} literal")
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise _Refused(node, "a starred item (*x) in a list")
        items = [_value(e, names) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for key, val in zip(node.keys, node.values, strict=True):
            if key is None:
                raise _Refused(node, "a `**x` in a dict literal")
            k = _value(key, names)
            if not isinstance(k, (str, int)):
                raise _Refused(key, "a dict key that is not a string or number")
            out[k] = _value(val, names)
        return out
    if isinstance(node, ast.Call):
        return _dict_call(node, names)
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise _Refused(node, f"the name '{node.id}', which the file neither imports nor defines above")
        return _copy(names[node.id])
    if isinstance(node, ast.Subscript):
        container, key = _item_target(node, names)
        return _copy(container[key])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, names), _value(node.right, names)
        if isinstance(left, str) and isinstance(right, str):
            return left + right  # 'demo_' + abbr, as the demo configs do
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        raise _Refused(node, "a `+` of something other than two strings or two lists")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)) \
            and not isinstance(node.operand.value, bool):  # fmt: skip
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    raise _Refused(node, f"a computed value ({type(node).__name__}: {ast.unparse(node)[:60]})")


def _item_target(node: ast.Subscript, names: dict[str, Any]) -> tuple[Any, Any]:
    """(container, key) of ``name[k1][k2]...`` with constant keys, the container looked up in ``names``."""
    keys: list[Any] = []
    cur: ast.expr = node
    while isinstance(cur, ast.Subscript):
        if not (isinstance(cur.slice, ast.Constant) and isinstance(cur.slice.value, (int, str))):
            raise _Refused(cur, "a subscript that is not a constant index or key")
        keys.insert(0, cur.slice.value)
        cur = cur.value
    if not isinstance(cur, ast.Name) or cur.id not in names:
        raise _Refused(node, "a subscript of something other than a variable defined above")
    container = names[cur.id]
    for key in keys[:-1]:
        container = _index(container, key, node)
    _index(container, keys[-1], node, assign=True)
    return container, keys[-1]


def _index(container: Any, key: Any, node: ast.AST, assign: bool = False) -> Any:
    if isinstance(container, list) and isinstance(key, int) and -len(container) <= key < len(container):
        return container[key]
    if isinstance(container, dict) and (key in container or assign):
        return container.get(key)
    raise _Refused(node, f"the index or key {key!r} is not in the value")


def _dict_call(node: ast.Call, names: dict[str, Any]) -> dict[str, Any]:
    if not (isinstance(node.func, ast.Name) and node.func.id == "dict" and "dict" not in names):
        raise _Refused(node, f"a call of {ast.unparse(node.func)[:40]}() (only dict(...) is read)")
    if node.args:
        raise _Refused(node, "dict(...) with positional arguments (write dict(key=value, ...))")
    out: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise _Refused(node, "dict(**x)")
        out[kw.arg] = _value(kw.value, names)
    return out


def _copy(value: Any) -> Any:
    """A deep copy of a read value (mmengine gives every use of a variable its own dict)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value
