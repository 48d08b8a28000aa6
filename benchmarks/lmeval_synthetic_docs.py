"""What an lm-eval task reads from one document, and synthetic rows that fill it (used by ``lmeval_coverage.py``).

The fields are the ones the task's templates (Jinja AST: ``x.y`` is a dict, ``x[i]`` and ``for .. in x`` a list,
``x - 1`` an integer) and its Python (``doc["x"]`` in the task folder's ``!function`` module) read, filled with
plain values; a few fillings differ in the plain values (digits, letters, words, a sentence with ``_``).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

LIST_NAMES = re.compile(r"(choices|options|endings|candidates|answers|targets|labels|alternatives|sentences|"
                        r"contexts|responses|hypotheses|premises|list|items)$", re.I)  # fmt: skip
INT_NAMES = re.compile(r"^(label|gold|answer_idx|answer_index|correct|idx|answerKey_idx|target_idx|ending_idx|"
                       r"correct_answer_num|answer_number|lbl)$", re.I)  # fmt: skip
STR_METHODS = {"split", "strip", "lower", "upper", "replace", "startswith", "endswith", "format", "title",
               "capitalize", "lstrip", "rstrip", "join", "count", "find", "splitlines", "isdigit",
               "casefold"}  # fmt: skip
JINJA_GLOBALS = {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "loop", "true", "false", "none",
                 "True", "False", "None"}  # fmt: skip
DROP = "<not in the stored row>"  # a repair's value for a field the row must not have
LIST_METHODS = {"index", "append", "extend", "pop", "insert"}
LIST_FILTERS = {"join", "length", "first", "last", "list", "count", "reverse", "sort", "batch", "map", "select",
                "reject", "unique", "sum", "max", "min", "random"}  # fmt: skip


# ---------------------------------------------------------------------------- what a task reads from a document
class Shape:
    """The inferred shape of one document field: str, int, list (of shapes) or dict (of shapes)."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.keys: dict[str, Shape] = {}
        self.item: Shape | None = None

    def key(self, name: str) -> Shape:
        if self.kind not in ("dict",):
            self.kind = "dict"
        return self.keys.setdefault(name, Shape())

    def as_list(self) -> Shape:
        if self.kind != "dict":
            self.kind = "list"
        if self.item is None:
            self.item = Shape()
        return self.item

    def value(self, fill: dict[str, Any], name: str = "") -> Any:
        kind = self.kind or fill["by_name"](name)
        if fill.get("plain") and kind == "list" and not self.keys:  # inferred lists taken as plain values
            kind = fill["by_name"](name)
        if kind == "dict":
            return {k: s.value(fill, k) for k, s in self.keys.items()} or {"text": fill["str"]}
        if kind == "list":
            item = self.item or Shape()
            return [item.value(fill, "") if item.kind else v for v in fill["list"]] if item.kind in (None, "str") \
                else [item.value(fill, "") for _ in range(4)]
        if kind == "int":
            return fill["int"]
        return fill["str"]


def _jinja_walk(node: Any, fields: dict[str, Shape]) -> None:
    from jinja2 import nodes

    def shape_of(expr: Any) -> Shape | None:
        if isinstance(expr, nodes.Name) and expr.ctx == "load":
            if expr.name in JINJA_GLOBALS:  # a field of that name would shadow it in the template
                return None
            return fields.setdefault(expr.name, Shape())
        if isinstance(expr, nodes.Getattr):
            base = shape_of(expr.node)
            if base is None or expr.attr in STR_METHODS or expr.attr in LIST_METHODS:
                return None
            return base.key(expr.attr)
        if isinstance(expr, nodes.Getitem):
            base = shape_of(expr.node)
            arg = expr.arg
            if isinstance(arg, nodes.Name):  # an index read from the document: an integer
                fields.setdefault(arg.name, Shape()).kind = "int"
            if base is None:
                return None
            if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
                return base.key(arg.value)
            if isinstance(arg, nodes.Name):
                fields.setdefault(arg.name, Shape()).kind = "int"
            return base.as_list()
        return None

    methods = {id(c.node) for c in node.find_all(nodes.Call) if isinstance(c.node, nodes.Getattr)}
    for call in node.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr in LIST_METHODS:
            s = shape_of(call.node.node)
            if s is not None:
                s.as_list()
    for sub in node.find_all((nodes.Getattr, nodes.Getitem, nodes.Name, nodes.For, nodes.Filter)):
        if id(sub) in methods:
            continue
        if isinstance(sub, nodes.For):
            s = shape_of(sub.iter)
            if s is not None:
                s.as_list()
        elif isinstance(sub, nodes.Filter) and sub.name in LIST_FILTERS and sub.node is not None:
            s = shape_of(sub.node)
            if s is not None and s.kind is None:
                s.as_list()
        else:
            shape_of(sub)


def _template_fields(template: str, fields: dict[str, Shape], role: str) -> None:
    import jinja2

    if re.fullmatch(r"[\w\- ]+", template) and "{{" not in template:
        shape = fields.setdefault(template, Shape())
        if role == "choice":
            shape.as_list()
        return
    try:
        ast = jinja2.Environment().parse(template)
    except jinja2.TemplateSyntaxError:
        return
    _jinja_walk(ast, fields)
    if role == "choice":  # "{{ expr }}" as doc_to_choice: the expression is the list of choices
        from jinja2 import nodes

        body = ast.body
        if len(body) == 1 and isinstance(body[0], nodes.Output) and len(body[0].nodes) == 1:
            expr = body[0].nodes[0]
            path = []
            while isinstance(expr, (nodes.Getattr, nodes.Getitem)):
                key = expr.attr if isinstance(expr, nodes.Getattr) else getattr(expr.arg, "value", None)
                if not isinstance(key, str):
                    return
                path.append(key)
                expr = expr.node
            if isinstance(expr, nodes.Name):
                shape = fields.setdefault(expr.name, Shape())
                for key in reversed(path):
                    shape = shape.key(key)
                shape.as_list()


_DOC_KEY = re.compile(r"""(?:doc|example|x|d|row|sample|item|ex|line|instance|document|data|examples|batch|inst)"""
                      r"""\s*\[\s*["']([^"'\]]+)["']\s*\](\s*\[\s*(["']?)([^\]]*)\3\s*\])?""")  # fmt: skip
_GET_KEY = re.compile(r"""\.get\(\s*["']([^"']+)["']""")
_LEN_OF = re.compile(r"""(?:enumerate|zip|sorted|list)\(\s*\w+\s*\[\s*["']([^"']+)["']\s*\]""")
_FOR_IN = re.compile(r"""in\s+\w+\s*\[\s*["']([^"']+)["']\s*\]\s*:""")


_FSTRING_KEY = re.compile(r"""\w+\[\s*f(["'])([^"'\]]*\{\w+\}[^"'\]]*)\1\s*\](\s*\[\s*(["']?)([^\]]*)\4\s*\])?""")
_FSTRING_POP = re.compile(r"""\.(?:pop|get)\(\s*f(["'])([^"'\]]*\{\w+\}[^"'\]]*)\1()()()""")
_RANGE_LOOP = re.compile(r"""for\s+(\w+)\s+in\s+range\(\s*(?:(\d+)\s*,\s*)?(\d+)\s*\)""")


def _fstring_fields(text: str, fields: dict[str, Shape]) -> None:
    """``doc[f"q_shot_{shot}"]`` inside ``for shot in range(1, 26)``: the fields ``q_shot_1`` .. ``q_shot_25``
    (a loop variable's values, over every ``range`` loop of that name in the file)."""
    values: dict[str, set[int]] = {}
    for var, lo, hi in _RANGE_LOOP.findall(text):
        values.setdefault(var, set()).update(range(int(lo or 0), min(int(hi), int(lo or 0) + 64)))
    for m in [*_FSTRING_KEY.finditer(text), *_FSTRING_POP.finditer(text)]:
        names = re.findall(r"\{(\w+)\}", m.group(2))
        if len(names) != 1 or names[0] not in values:
            continue
        for v in sorted(values[names[0]]):
            shape = fields.setdefault(m.group(2).replace("{" + names[0] + "}", str(v)), Shape())
            if m.group(4):
                shape.key(m.group(5))
            elif m.group(3) and ":" not in m.group(5) and shape.kind is None:  # x[0], x[int(..)]: a list
                shape.as_list()


def _python_fields(path: str, fields: dict[str, Shape]) -> None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    _fstring_fields(text, fields)
    for m in _DOC_KEY.finditer(text):
        shape = fields.setdefault(m.group(1), Shape())
        if m.group(2):
            if m.group(3):
                shape.key(m.group(4))
            elif ":" not in m.group(4) and shape.kind is None:  # x[i] a list, x[a:b] may be a string
                shape.as_list()
    for m in _GET_KEY.finditer(text):
        fields.setdefault(m.group(1), Shape())
    for rx in (_LEN_OF, _FOR_IN):
        for m in rx.finditer(text):
            shape = fields.setdefault(m.group(1), Shape())
            if shape.kind is None:
                shape.as_list()


def document_fields(cfg: dict[str, Any]) -> dict[str, Shape]:
    """The fields (with inferred shapes) that a task's templates and Python read from one document."""
    fields: dict[str, Shape] = {}
    sources = [cfg, cfg.get("fewshot_config") or {}]
    for src in sources:
        for key, role in (("doc_to_text", "text"), ("doc_to_target", "target"), ("doc_to_choice", "choice"),
                          ("description", "text"), ("gen_prefix", "text"), ("doc_to_image", "image"),
                          ("doc_to_audio", "audio"), ("doc_to_decontamination_query", "text")):  # fmt: skip
            value = src.get(key)
            if isinstance(value, str):
                _template_fields(value, fields, role)
            elif isinstance(value, list):
                for v in value:
                    if isinstance(v, str):
                        _template_fields(v, fields, role)
    for value in [*cfg.values(), *(cfg.get("fewshot_config") or {}).values(), *_nested_callables(cfg)]:
        if callable(value) and not isinstance(value, type):
            try:
                path = inspect.getsourcefile(value)
            except TypeError:
                path = None
            if path and "site-packages/lm_eval/tasks" in path:
                _python_fields(path, fields)
    if "class" in cfg and callable(cfg["class"]):
        try:
            path = inspect.getsourcefile(cfg["class"])
            if path:
                _python_fields(path, fields)
        except TypeError:
            pass
    return fields


def _nested_callables(cfg: dict[str, Any]) -> list[Any]:
    out = []
    for fl in cfg.get("filter_list") or []:
        for step in (fl.get("filter") or []) if isinstance(fl, dict) else []:
            if isinstance(step, dict):
                out.extend(v for v in step.values() if callable(v))
    for m in cfg.get("metric_list") or []:
        if isinstance(m, dict):
            out.extend(v for v in m.values() if callable(v))
    return out


def fills() -> list[dict[str, Any]]:
    def by_name(label_kind: str) -> Any:
        def pick(name: str) -> str:
            if LIST_NAMES.search(name):
                return "list"
            if INT_NAMES.match(name):
                return label_kind
            return "str"

        return pick

    base = ["1", "2", "3", "4"]
    letters = ["A", "B", "C", "D"]
    return [
        {"str": "1", "int": 0, "list": base, "by_name": by_name("int")},
        {"str": "A", "int": 0, "list": letters, "by_name": by_name("str")},
        {"str": "1", "int": 1, "list": base, "by_name": by_name("str")},
        {"str": "alpha beta", "int": 0, "list": ["alpha", "beta", "gamma", "delta"], "by_name": by_name("int")},
        {"str": "0", "int": 0, "list": base, "by_name": lambda name: "list" if LIST_NAMES.search(name) else "int"},
        {"str": "The _ is 1. Answer: A #### 1 $\\boxed{1}$", "int": 0, "list": ["A _ 1", "B _ 2", "C _ 3", "D _ 4"],
         "by_name": by_name("int")},
        {"str": "1", "int": 0, "list": base, "by_name": by_name("int"), "plain": True},
        {"str": "The _ is 1. Answer: A #### 1 $\\boxed{1}$", "int": 0, "list": base, "by_name": by_name("str"),
         "plain": True},
    ]


def synthetic_splits(cfg: dict[str, Any], fields: dict[str, Shape], fill: dict[str, Any],
                     overrides: dict[str, Any] | None = None, min_copies: int = 1,
                     distinct: bool = False) -> dict[str, list[Any]]:  # fmt: skip
    """One row per split the task names (plus the usual three), each field filled with plain values (or the value
    a repair set). ``distinct``: the copies differ in a row-number column ``_row``, for a task whose few-shot pool
    is its test split (lm-eval leaves out every few-shot document equal to the one evaluated)."""
    row = {name: shape.value(fill, name) for name, shape in fields.items()} or {"text": fill["str"]}
    row.update(overrides or {})
    row = {k: v for k, v in row.items() if not (isinstance(v, str) and v == DROP)} or {"text": fill["str"]}
    splits = {"train", "validation", "test"}
    for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
        value = cfg.get(key)
        if isinstance(value, str):
            splits.add(value)
    shots = cfg.get("num_fewshot")
    copies = 1 + (int(shots) if isinstance(shots, int) and shots > 0 else 0)  # a few-shot pool needs shots + 1
    copies = max(copies, min_copies)
    if distinct:
        return {s: [{**row, "_row": i} for i in range(copies)] for s in splits}
    return {s: [dict(row) for _ in range(copies)] for s in splits}


def constants(cfg: dict[str, Any]) -> list[str]:
    """String constants a task's code may select rows by: the arguments bound into its functions
    (``partial(filter_subject, subject=...)``), its ``dataset_name``."""
    import functools

    out: list[str] = []
    for value in cfg.values():
        if isinstance(value, functools.partial):
            out.extend(v for v in [*value.args, *value.keywords.values()] if isinstance(v, str))
    if isinstance(cfg.get("dataset_name"), str):
        out.append(cfg["dataset_name"])
    return list(dict.fromkeys(out))


def templates(cfg: dict[str, Any]) -> str:
    """The task's Jinja templates, one a line."""
    keys = ("doc_to_text", "doc_to_target", "doc_to_choice", "gen_prefix", "description")
    found = [v for src in (cfg, cfg.get("fewshot_config") or {}) for k in keys for v in [src.get(k)]]
    return "\n".join(v for v in found if isinstance(v, str) and "{" in v)




def raw_fields(cfg: dict[str, Any], fields: dict[str, Shape]) -> dict[str, Shape] | None:
    """The fields of a document as stored, before the task's ``process_docs`` (None when it changes nothing).

    A field that a template reads but ``process_docs`` writes (a key of the mapping it returns, ``doc["x"] = ..``)
    and never reads is not in the stored document: a task that takes every other key as an option (AlGhafa's
    ``for key in doc.keys()``) rejects a row that has it. Such a task gets a few plain option fields instead."""
    import ast
    import functools

    func = cfg.get("process_docs")
    while isinstance(func, functools.partial):  # a shared helper with the task's templates bound in
        func = func.func
    trees = [_source_tree(f) for f in ([func, *_task_callees(func)] if callable(func) else [])]
    trees = [t for t in trees if t is not None]
    if not trees:
        return None
    written: set[str] = set()
    read: set[str] = set()
    for tree in trees:
        w, r = _written_and_read(tree)
        written |= w
        read |= r
    drop = (written - read) & set(fields)
    if not drop:
        return None
    out = {k: v for k, v in fields.items() if k not in drop}
    if re.search(r"\bdoc\.keys\(\)|\bin\s+doc\s*:|\bdoc\.items\(\)", ast.unparse(trees[0])):
        out.update({f"option_{c}": Shape() for c in "abcd"})
    return out


def _source_tree(func: Any) -> Any:
    import ast
    import textwrap

    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None


def _task_callees(func: Any) -> list[Any]:
    """The task-folder functions ``func`` calls by name (``helper(..)``, ``utils.helper(..)``): a ``process_docs``
    that hands the data set to a shared helper."""
    import ast

    tree = _source_tree(func)
    scope = getattr(func, "__globals__", {})
    out = []
    for node in ast.walk(tree) if tree is not None else []:
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        target = scope.get(f.id) if isinstance(f, ast.Name) else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            target = getattr(scope.get(f.value.id), f.attr, None)
        if callable(target) and "lm_eval.tasks" in str(getattr(target, "__module__", "")) and target is not func:
            out.append(target)
    return out


def _written_and_read(tree: Any) -> tuple[set[str], set[str]]:
    """Keys a function writes into a document (a returned mapping, ``x["k"] = ..``) and keys it reads from a
    document it is handed (``doc["k"]`` of a parameter; ``new["k"].append(..)`` on a mapping it builds is a
    write, ``template["k"]`` of a file it reads is neither)."""
    import ast

    written: set[str] = set()
    stored_into: set[str] = set()
    loads: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            written |= {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        key = node.slice.value if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) else None
        if isinstance(node, ast.Subscript) and isinstance(key, str):
            base = ast.unparse(node.value)
            if isinstance(node.ctx, ast.Store):
                written.add(key)
                stored_into.add(base)
            else:
                loads.append((base, key))
    params = {a.arg for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.Lambda))
              for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}  # fmt: skip
    return written, {k for base, k in loads if base not in stored_into and base in params}
