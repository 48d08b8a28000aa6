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
    """Top-level package -> its import circles; imports between its own modules, sub-packages' included, count
    (package faces do not)."""
    graph = import_graph(src)
    faces = {n.rpartition(".")[0] for n in graph if n.count(".") >= 2}  # every package's __init__
    packages = sorted({".".join(n.split(".")[:2]) for n in graph if n.count(".") >= 2})
    found: dict[str, list[list[str]]] = {}
    for pkg in packages:  # a top-level package with its sub-packages (sessions.perf, core.runs, ...) as one
        members = {n for n in graph if n.startswith(pkg + ".") and n not in faces}
        sub = {n: {m for m in graph[n] if m in members} for n in members}
        circles = _strongly_connected(sub)
        if circles:
            found[pkg] = circles
    return found


#: docs/architecture.md's map, lowest first: an import may point to its own layer or one below, never up.
#: ``testing`` (the shipped fakes) may use anything below ``cli``.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",), ("config",), ("profiling", "media", "datasets", "metrics", "models"), ("engines", "backends", "loadgen"),
    ("specs", "serve", "reports", "evaluation", "episodes"), ("sessions",), ("testing",), ("executors",), ("cli",),
)


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(src: Path = SRC) -> list[str]:
    """``importer -> imported`` for every import that points up the layers, or into a package not on the map."""
    level = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
    out = []
    for name, deps in import_graph(src).items():
        here = _top(name)
        if not here:
            continue
        if here not in level:
            out.append(f"{name}: package {here!r} is not on the map")
            continue
        out.extend(f"{name} -> {dep}" for dep in sorted(deps)
                   if _top(dep) and _top(dep) != here and level.get(_top(dep), len(LAYERS)) > level[here])
    return out


def package_level_circles(src: Path = SRC) -> list[list[str]]:
    """Circles between top-level packages (same-layer imports are allowed, a loop between packages is not)."""
    graph: dict[str, set[str]] = {}
    for name, deps in import_graph(src).items():
        if _top(name):
            graph.setdefault(_top(name), set()).update(_top(d) for d in deps if _top(d) and _top(d) != _top(name))
    return _strongly_connected(graph)


def main() -> int:
    found = package_circles()
    for pkg, circles in found.items():
        for comp in circles:
            print(f"{pkg}: " + " <-> ".join(m[len(pkg) + 1:] for m in comp))
    up = upward_imports()
    for line in up:
        print(f"up the map: {line}")
    loops = package_level_circles()
    for comp in loops:
        print("between packages: " + " <-> ".join(comp))
    return 1 if found or up or loops else 0


if __name__ == "__main__":
    sys.exit(main())
