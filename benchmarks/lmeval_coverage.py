"""Coverage of lm-evaluation-harness's catalogue: does lmmbench ask the model what lm-eval asks it, for every task?

    PYTHONPATH=src .venv/bin/python benchmarks/lmeval_coverage.py [--workers 2] [--time-box-s 3000] \
        [--out /tmp/lmeval_coverage.jsonl] [--only NAME ...] [--markdown]

For every entry of ``TaskManager().all_subtasks`` of the installed lm-eval (0.4.13 pinned), the task is built by
lm-eval's own task system with ``datasets.load_dataset`` patched to return one synthetic row per split. The row's
fields are the ones the task's templates (Jinja AST: ``x.y`` is a dict, ``x[i]`` and ``for .. in x`` a list) and
its Python (``doc["x"]`` in the task folder's ``!function`` module) read, filled with plain values; when lm-eval
rejects the row (a missing key, a value of the wrong kind) the script tries a few other plain fillings.
lm-eval builds the task's ``Instance``s for that document (few-shot context, chat template off). lmmbench's LM
adapter (``lmmbench.evaluation.lmeval_catalogue.make_lm``, the object a catalogue run hands to lm-eval) then
answers those instances with a recording scoring backend, and the script checks that each request the adapter sends
to lmmbench's scoring backend is the instance's request: the same request type (log-likelihood, rolling
log-likelihood, generation) and the same arguments (context and continuation; the text; the prompt, stop strings,
``max_gen_toks`` and the sampling settings lm-eval's ``generate_until`` kwargs ask for; images for multimodal tasks).

A task counts as *checked* when its instances were built and compared; *equal* when every request matched.
The other outcomes are listed with their reason: the synthetic row was not accepted by the task's code (a
limitation of this measurement, not of lmmbench: such a task needs its real data), the task needs something
absent here (a package, a file, a network service), or a request differed (a gap in lmmbench).
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import logging
import multiprocessing as mp
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

LIST_NAMES = re.compile(r"(choices|options|endings|candidates|answers|targets|labels|alternatives|sentences|"
                        r"contexts|responses|hypotheses|premises|list|items)$", re.I)  # fmt: skip
INT_NAMES = re.compile(r"^(label|gold|answer_idx|answer_index|correct|idx|answerKey_idx|target_idx|ending_idx|"
                       r"correct_answer_num|answer_number|lbl)$", re.I)  # fmt: skip
STR_METHODS = {"split", "strip", "lower", "upper", "replace", "startswith", "endswith", "format", "title",
               "capitalize", "lstrip", "rstrip", "join", "count", "find", "splitlines", "isdigit",
               "casefold"}  # fmt: skip
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


def _python_fields(path: str, fields: dict[str, Shape]) -> None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
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


FILLS: list[dict[str, Any]] = []


def _fills() -> list[dict[str, Any]]:
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
        {"str": "The _ is 1. Answer: A #### 1", "int": 0, "list": ["A _ 1", "B _ 2", "C _ 3", "D _ 4"],
         "by_name": by_name("int")},
        {"str": "1", "int": 0, "list": base, "by_name": by_name("int"), "plain": True},
        {"str": "The _ is 1. Answer: A #### 1", "int": 0, "list": base, "by_name": by_name("str"), "plain": True},
    ]


def synthetic_splits(cfg: dict[str, Any], fields: dict[str, Shape], fill: dict[str, Any]) -> dict[str, list[Any]]:
    """One row per split the task names (plus the usual three), each field filled with plain values."""
    row = {name: shape.value(fill, name) for name, shape in fields.items()} or {"text": fill["str"]}
    splits = {"train", "validation", "test"}
    for key in ("training_split", "validation_split", "test_split", "fewshot_split"):
        value = cfg.get(key)
        if isinstance(value, str):
            splits.add(value)
    shots = cfg.get("num_fewshot")
    copies = 1 + (int(shots) if isinstance(shots, int) and shots > 0 else 0)  # a few-shot pool needs shots + 1
    return {s: [dict(row) for _ in range(copies)] for s in splits}


# ---------------------------------------------------------------------------- the comparison
class RecordingBackend:
    """lmmbench's ScoringBackend protocol; records every request the LM adapter sends."""

    model_id = "recording"
    supports_media = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def loglikelihood(self, requests: Any, progress: Any = None) -> list[tuple[float, bool]]:
        self.sent.extend(("loglikelihood", r) for r in requests)
        return [(-1.0, False)] * len(requests)

    def loglikelihood_rolling(self, texts: Any, progress: Any = None) -> list[float]:
        self.sent.extend(("loglikelihood_rolling", t) for t in texts)
        return [-1.0] * len(texts)

    def generate(self, requests: Any, progress: Any = None) -> list[str]:
        self.sent.extend(("generate_until", r) for r in requests)
        return [""] * len(requests)

    def chat_prompt(self, messages: Any, n_images: int = 0, n_audio: int = 0) -> str:
        return json.dumps(messages)


def expected_generation(gen_kwargs: dict[str, Any]) -> dict[str, Any]:
    """What lm-eval's generate_until kwargs ask of the model, in lmmbench's GenRequest terms."""
    from lmmbench.evaluation.lmeval_catalogue import sampling_from_gen_kwargs

    until = gen_kwargs.get("until") or []
    stop = [until] if isinstance(until, str) else list(until)
    aliases = [gen_kwargs.get(k) for k in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")]
    out = {"max_tokens": int(next((a for a in aliases if a is not None), 256)), "stop": stop}
    out.update(sampling_from_gen_kwargs(gen_kwargs))
    return out


def compare_instances(instances: list[Any]) -> list[str]:
    """Differences between lm-eval's instances and the requests lmmbench's adapter sends for them."""
    from lmmbench.evaluation.lmeval_catalogue import make_lm

    backend = RecordingBackend()
    lm = make_lm(backend)
    by_type: dict[str, list[Any]] = collections.defaultdict(list)
    for inst in instances:
        by_type[inst.request_type].append(inst)
    diffs: list[str] = []
    for rtype, group in by_type.items():
        if rtype not in ("loglikelihood", "loglikelihood_rolling", "generate_until", "multiple_choice"):
            diffs.append(f"request type {rtype} has no lmmbench request")
            continue
        start = len(backend.sent)
        method = "loglikelihood" if rtype == "multiple_choice" else rtype
        try:
            getattr(lm, method)(group)
        except Exception as exc:  # the adapter refused or failed: a difference
            diffs.append(f"{rtype}: adapter raised {type(exc).__name__}: {str(exc)[:160]}")
            continue
        sent = backend.sent[start:]
        if len(sent) != len(group):
            diffs.append(f"{rtype}: {len(group)} instances, {len(sent)} requests")
            continue
        for inst, (kind, req) in zip(group, sent, strict=True):
            diffs.extend(_diff_one(method, kind, inst.args, req))
    return diffs


def _diff_one(method: str, kind: str, args: tuple[Any, ...], req: Any) -> list[str]:
    if kind != method:
        return [f"request type {method} sent as {kind}"]
    media = args[2] if len(args) > 2 and isinstance(args[2], dict) else None
    got_media = bool(getattr(req, "images", None) or getattr(req, "audio", None))
    if media and any(media.get(k) for k in ("visual", "audio")) and not got_media:
        return [f"{method}: images / audio of the instance not carried"]
    if method == "loglikelihood":
        return [] if (req.context, req.continuation) == tuple(args[:2]) else ["loglikelihood: context / continuation"]
    if method == "loglikelihood_rolling":
        return [] if req == args[0] else ["loglikelihood_rolling: text"]
    want = expected_generation(dict(args[1] or {}))
    got = {"max_tokens": req.max_tokens, "stop": list(req.stop), "temperature": req.temperature,
           "top_p": req.top_p, "top_k": req.top_k}  # fmt: skip
    out = [] if req.prompt == args[0] else ["generate_until: prompt"]
    out.extend(f"generate_until: {k} {got.get(k)!r} != {v!r}" for k, v in want.items() if got.get(k) != v)
    return out


# ---------------------------------------------------------------------------- one task
def _patched_load_dataset(splits: dict[str, list[Any]]) -> Any:
    import datasets

    def load_dataset(*args: Any, **kwargs: Any) -> Any:
        dd = datasets.DatasetDict({s: datasets.Dataset.from_list(rows) for s, rows in splits.items()})
        split = kwargs.get("split")
        if isinstance(split, str):
            return dd[split.split("[")[0]] if split.split("[")[0] in dd else dd["test"]
        return dd

    return load_dataset


_MISSING_KEY = [re.compile(r"""KeyError: ['"]([^'"]+)['"]"""),
                re.compile(r"""[Cc]olumn(?: name)?s? \[?['"]([^'"]+)['"]"""),
                re.compile(r"""'([^']+)' is undefined""")]  # fmt: skip


def check_task(tm: Any, name: str, hint: int | None) -> dict[str, Any]:
    """Build one task on synthetic rows and compare its instances with lmmbench's requests."""
    import datasets

    t0 = time.perf_counter()
    entry = tm._entry(name)
    try:
        cfg = tm._factory._load_full_config(entry)
    except Exception as exc:
        return {"task": name, "status": "config", "reason": _reason(exc), "s": time.perf_counter() - t0}
    fields = document_fields(cfg)
    fills = _fills() + [{"str": c, "int": 0, "list": [c, "1", "2", "3"], "by_name": _fills()[0]["by_name"]}
                        for c in _constants(cfg)[:3]]  # fmt: skip
    order = ([hint] if hint is not None else []) + [i for i in range(len(fills)) if i != hint]
    first = ""
    attempts = 0
    for fi in order:
        extra: dict[str, Shape] = {}
        for _ in range(6):
            attempts += 1
            splits = synthetic_splits(cfg, {**fields, **extra}, fills[fi])
            real = datasets.load_dataset
            datasets.load_dataset = _patched_load_dataset(splits)
            try:
                task = tm._factory.build(entry, overrides=None, registry=tm._index)
                task.build_all_requests(limit=1, rank=0, world_size=1)
                instances = list(task.instances)
            except Exception as exc:
                first = first or _reason(exc)
                missing = _missing_key(exc, {**fields, **extra})
                if missing:
                    extra[missing] = Shape()
                    continue
                break
            finally:
                datasets.load_dataset = real
            diffs = compare_instances(instances)
            types = sorted({i.request_type for i in instances})
            return {"task": name, "status": "equal" if not diffs else "differs", "reason": "; ".join(diffs[:3]),
                    "types": types, "n_instances": len(instances), "fill": fi, "attempts": attempts,
                    "s": round(time.perf_counter() - t0, 3)}  # fmt: skip
    return {"task": name, "status": "not built", "reason": first, "attempts": attempts,
            "s": round(time.perf_counter() - t0, 3)}  # fmt: skip


def _constants(cfg: dict[str, Any]) -> list[str]:
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


def _missing_key(exc: BaseException, known: dict[str, Any]) -> str | None:
    text = f"{type(exc).__name__}: {exc}"
    for rx in _MISSING_KEY:
        m = rx.search(text)
        if m and m.group(1) not in known and len(m.group(1)) < 80:
            return m.group(1)
    return None


def _reason(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(tb):
        if "lm_eval/tasks/" in frame.filename:
            where = f" at {frame.filename.split('lm_eval/')[-1]}:{frame.lineno}"
            break
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first[:200]}{where}"


# ---------------------------------------------------------------------------- the run
def _signature(tm: Any, name: str) -> str:
    entry = tm._entry(name)
    return str(entry.yaml_path.parent if entry and entry.yaml_path else name)


def worker(names: list[str], out_path: str, deadline: float) -> None:
    """Check ``names`` in this process, appending one JSON line per task to ``out_path``."""
    logging.disable(logging.CRITICAL)
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets

    datasets.disable_progress_bars()
    from lm_eval.tasks import TaskManager

    tm = TaskManager()
    hints: dict[str, int] = {}
    with open(out_path, "a", encoding="utf-8") as fh:
        for name in names:
            if time.time() > deadline:
                break
            sig = _signature(tm, name)
            try:
                row = check_task(tm, name, hints.get(sig))
            except BaseException as exc:  # a task's own code may raise anything
                if isinstance(exc, KeyboardInterrupt):
                    raise
                row = {"task": name, "status": "not built", "reason": _reason(exc)}
            if "fill" in row:
                hints[sig] = int(row["fill"])
            fh.write(json.dumps(row) + "\n")
            fh.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--time-box-s", type=float, default=3000.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/lmeval_coverage.jsonl"))
    p.add_argument("--only", nargs="*", default=None, help="check only these tasks")
    p.add_argument("--sample", type=int, default=0, help="check every N-th task only (a quick look)")
    p.add_argument("--markdown", action="store_true", help="summarise an existing --out file and exit")
    args = p.parse_args(argv)
    if args.markdown:
        print(summarise(args.out))
        return 0
    from lm_eval.tasks import TaskManager

    logging.disable(logging.CRITICAL)
    tm = TaskManager()
    names = list(args.only or tm.all_subtasks)
    if args.sample:
        names = names[:: args.sample]
    done = set()
    if args.out.exists():
        done = {json.loads(x)["task"] for x in args.out.read_text().splitlines() if x.strip()}
    todo = [n for n in names if n not in done]
    # tasks of one folder share a synthetic filling: keep them in one worker, folders spread round-robin
    folders: dict[str, list[str]] = collections.defaultdict(list)
    for n in todo:
        folders[_signature(tm, n)].append(n)
    shares: list[list[str]] = [[] for _ in range(max(1, args.workers))]
    for i, group in enumerate(sorted(folders.values(), key=len, reverse=True)):
        min(shares, key=len).extend(group) if i else shares[0].extend(group)
    deadline = time.time() + args.time_box_s
    print(f"lm-eval catalogue: {len(names)} subtasks, {len(todo)} to check, {args.workers} workers", file=sys.stderr)
    procs = [mp.get_context("spawn").Process(target=worker, args=(s, str(args.out), deadline)) for s in shares if s]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    print(summarise(args.out, total=len(names)))
    return 0


def summarise(path: Path, total: int | None = None) -> str:
    """A Markdown summary of a coverage file: counts, the reasons, the tasks that differ."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    total = total or len(rows)
    by = collections.Counter(r["status"] for r in rows)
    checked = by["equal"] + by["differs"]
    lines = [f"- subtasks in `TaskManager().all_subtasks`: {total}; reached in the time box: {len(rows)}",
             f"- built on one synthetic row and compared: {checked} ({100 * checked / max(total, 1):.1f} %)",
             f"- every request equal: {by['equal']} ({100 * by['equal'] / max(checked, 1):.2f} % of the compared)",
             f"- a request differs: {by['differs']}",
             f"- not built on a synthetic row: {by['not built'] + by['config']}"]  # fmt: skip
    diff_reasons = collections.Counter(r["reason"].split(";")[0] for r in rows if r["status"] == "differs")
    if diff_reasons:
        lines.append("\nRequests that differ (reason: tasks):\n")
        for reason, n in diff_reasons.most_common(20):
            ex = [r["task"] for r in rows if r["status"] == "differs" and r["reason"].startswith(reason)][:3]
            lines.append(f"- {n} × {reason} (e.g. {', '.join(ex)})")
    fail = collections.Counter(_short(r["reason"]) for r in rows if r["status"] in ("not built", "config"))
    if fail:
        lines.append("\nNot built on a synthetic row (reason: tasks):\n")
        for reason, n in fail.most_common(25):
            lines.append(f"- {n} × {reason}")
    types = collections.Counter(t for r in rows for t in r.get("types") or [])
    lines.append("\nRequest types among the compared tasks: " + ", ".join(f"{k} {v}" for k, v in types.most_common()))
    return "\n".join(lines)


def _short(reason: str) -> str:
    return re.sub(r"\d+", "N", reason)[:150]


if __name__ == "__main__":
    sys.exit(main())
