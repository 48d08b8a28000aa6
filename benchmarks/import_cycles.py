"""List the import circles inside each package of lmmbench (imports read from the AST).

A circle is a set of modules of one package (``lmmbench.core``, ``lmmbench.profiling``, ...) that
import each other, directly or around a loop. An import deferred into a function counts: it only
hides a circle from the interpreter, not from the reader. Imports under ``if TYPE_CHECKING:`` never
run and do not count.

    python benchmarks/import_cycles.py            # one line per circle; exit 1 when there is any
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that can run: at the top, in functions (deferred), never under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield from _import_nodes(ast.Module(body=[stmt], type_ignores=[]))
        else:
            yield from _import_nodes(child)


def module_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The lmmbench modules ``path`` (module ``name``) imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the lmmbench modules it imports."""
    paths = {_module_name(p, src): p for p in sorted((src / "lmmbench").rglob("*.py"))}
    known = set(paths)
    return {name: module_imports(path, name, known) for name, path in paths.items()}


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def package_circles(src: Path = SRC) -> dict[str, list[list[str]]]:
    """Package -> its import circles; only imports between a package's own modules (not its face) count."""
    graph = import_graph(src)
    packages = sorted({n.rpartition(".")[0] for n in graph if n.count(".") >= 2})
    found: dict[str, list[list[str]]] = {}
    for pkg in packages:
        members = {n for n in graph if n.rpartition(".")[0] == pkg}
        sub = {n: {m for m in graph[n] if m in members} for n in members}
        circles = _strongly_connected(sub)
        if circles:
            found[pkg] = circles
    return found


def main() -> int:
    found = package_circles()
    for pkg, circles in found.items():
        for comp in circles:
            print(f"{pkg}: " + " <-> ".join(m.rpartition(".")[2] for m in comp))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
