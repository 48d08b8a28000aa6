"""lmmbench never patches a dependency: no assignment to an attribute of an imported third-party module or class.

A package that replaces a dependency's (private) method dies at import wherever that dependency has another
version: on a stock GPU image every command once failed on typer's missing ``TyperOption.display_type_rich``.
This reads every module of ``src/`` and fails on ``X.attr = ...``, ``setattr(X, ...)`` and ``del X.attr`` where
``X`` (or the root of a dotted ``X.a.b``) is a name bound by importing one of the libraries lmmbench depends on.
Instance-level wrapping the profiling hooks do (a model object's own method, restored afterwards) is not a
library patch and is allowed by docs/architecture.md ("What lmmbench changes in its dependencies").
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "lmmbench"

#: Top-level packages of lmmbench's dependencies (required and extras) whose modules and classes must not be patched.
THIRD_PARTY = {
    "typer", "click", "rich", "pydantic", "yaml", "tokenizers", "transformers", "torch", "accelerate", "av", "PIL",
    "soundfile", "numpy", "matplotlib", "fastapi", "uvicorn", "starlette", "jinja2", "sacrebleu", "pandas", "pyarrow",
    "datasets", "huggingface_hub", "lm_eval", "aiohttp", "httpx", "ray", "sqlalchemy", "gymnasium", "gym_pusht",
    "libero", "robosuite", "mujoco", "mlflow", "wandb", "pynvml", "uvloop", "evaluate", "tqdm",
}  # fmt: skip


def _imported_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in THIRD_PARTY:
                    names.add((alias.asname or alias.name).split(".")[0])
        elif (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
              and node.module.split(".")[0] in THIRD_PARTY):  # fmt: skip
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches_in(source: str) -> list[str]:
    """``line: code`` of every assignment to / deletion of an attribute of an imported third-party name."""
    tree = ast.parse(source)
    imported = _imported_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
              and node.args):  # fmt: skip
            targets = [ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())]
        for target in targets:
            if isinstance(target, ast.Attribute) and _root_name(target) in imported:
                found.append(f"{node.lineno}: {ast.unparse(node)[:120]}")
    return found


def test_no_module_of_src_patches_a_dependency() -> None:
    found = {str(path.relative_to(SRC)): hits for path in sorted(SRC.rglob("*.py"))
             if (hits := patches_in(path.read_text(encoding="utf-8")))}  # fmt: skip
    assert not found, f"assignments to attributes of third-party modules / classes: {found}"


def test_the_check_finds_the_patch_that_broke_gpu_images() -> None:
    patch = (
        "from typer.core import TyperOption\n"
        "def show(self, ctx):\n    return None\n"
        "TyperOption.display_type_rich = show\n"
    )
    assert patches_in(patch) == ["4: TyperOption.display_type_rich = show"]
    assert patches_in("import transformers\nsetattr(transformers.utils, 'x', 1)\n") == [
        "2: setattr(transformers.utils, 'x', 1)"
    ]
    assert patches_in("import torch\ndef f(model):\n    model.x = 1\n") == []
