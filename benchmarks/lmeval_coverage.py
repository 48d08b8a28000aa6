"""Coverage of lm-evaluation-harness's catalogue: does lmmbench ask the model what lm-eval asks it, for every task?

    PYTHONPATH=src .venv/bin/python benchmarks/lmeval_coverage.py [--workers 2] [--time-box-s 3000] \
        [--out /tmp/lmeval_coverage.jsonl] [--only NAME ...] [--sample N] [--retry-failed] [--markdown]

For every entry of ``TaskManager().all_subtasks`` of the installed lm-eval (0.4.13 pinned), the task is built by
lm-eval's own task system with ``datasets.load_dataset`` patched to return one synthetic row per split. The row's
fields are the ones the task's templates and Python read (``lmeval_synthetic_docs``), filled with plain values.
When the task's own code rejects the row, the error it raised says what it wanted (``lmeval_row_repair``): a
missing field is added, a field the code parses, looks up in its own table, does arithmetic on or indexes past its
end is given a value of that kind, and the task is built again (a few rounds, then the next plain filling). Within
the run a ``Dataset.filter`` that would drop every row of a split keeps them (a task selecting its documents by a
value the guessed row lacks): the check is about the request lmmbench builds for a document the task accepts.
What cannot be fetched offline has a stand-in inside the run only (metrics that raise when used, an untrained
Punkt splitter, a word-level tokenizer for the tasks that generate their own data, unitxt's loader patched like
``load_dataset``); none of them makes or changes a request. A task gets TASK_TIMEOUT_S to build.
lm-eval builds the task's ``Instance``s for that document (few-shot context, chat template off). lmmbench's LM
adapter (``lmmbench.evaluation.lmeval.catalogue.make_lm``, the object a catalogue run hands to lm-eval) then
answers those instances with a recording scoring backend, and the script checks that each request the adapter sends
to lmmbench's scoring backend is the instance's request: the same request type (log-likelihood, rolling
log-likelihood, generation) and the same arguments (context and continuation; the text; the prompt, stop strings,
``max_gen_toks`` and the sampling settings lm-eval's ``generate_until`` kwargs ask for; images for multimodal tasks).

One JSON line per task is appended to ``--out`` as it is checked; a run on an existing file goes on where it
stopped (``--retry-failed``: the tasks not built are checked again, their new line supersedes the old).
``--markdown`` summarises the file (with ``--sample`` / ``--only``: those tasks only).

A task counts as *checked* when its instances were built and compared; *equal* when every request matched.
The other outcomes are listed with their reason: the synthetic row was not accepted by the task's code (a
limitation of this measurement, not of lmmbench: such a task needs its real data), the task needs something
absent here (a package, a file, a network service), or a request differed (a gap in lmmbench).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing as mp
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from lmeval_coverage_standins import keep_synthetic_rows, stub_unavailable_metrics, untrained_punkt, word_tokenizer
from lmeval_row_repair import repair
from lmeval_synthetic_docs import Shape, constants, document_fields, fills, raw_fields, synthetic_splits, templates


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
    from lmmbench.evaluation.lmeval.catalogue import sampling_from_gen_kwargs

    until = gen_kwargs.get("until") or []
    stop = [until] if isinstance(until, str) else list(until)
    aliases = [gen_kwargs.get(k) for k in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")]
    out = {"max_tokens": int(next((a for a in aliases if a is not None), 256)), "stop": stop}
    out.update(sampling_from_gen_kwargs(gen_kwargs))
    return out


def compare_instances(instances: list[Any]) -> list[str]:
    """Differences between lm-eval's instances and the requests lmmbench's adapter sends for them."""
    from lmmbench.evaluation.lmeval.catalogue import make_lm

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
def _is_load_dataset(value: Any, real: Any) -> bool:
    return value is real or getattr(value, "_synthetic", False)


def _patched_load_dataset(splits: dict[str, list[Any]]) -> Any:
    import datasets

    def load_dataset(*args: Any, **kwargs: Any) -> Any:
        dd = datasets.DatasetDict({s: datasets.Dataset.from_list(rows) for s, rows in splits.items()})
        split = kwargs.get("split")
        if isinstance(split, str):
            return dd[split.split("[")[0]] if split.split("[")[0] in dd else dd["test"]
        return dd

    load_dataset._synthetic = True  # type: ignore[attr-defined]
    return load_dataset


_MISSING_KEY = [re.compile(r"""KeyError: ['"]([^'"]+)['"]"""),
                re.compile(r"""[Cc]olumn(?: name)?s? \[?['"]([^'"]+)['"]"""),
                re.compile(r"""'([^']+)' is undefined""")]  # fmt: skip


def check_task(tm: Any, name: str, hint: dict[str, Any] | None) -> dict[str, Any]:
    """Build one task on synthetic rows (repairing the row from the errors the task raises) and compare its
    instances with lmmbench's requests. ``hint``: what built another task of the same folder."""
    t0 = time.perf_counter()
    entry = tm._entry(name)
    try:
        cfg = tm._factory._load_full_config(entry)
    except Exception as exc:
        return {"task": name, "status": "config", "reason": _reason(exc), "s": time.perf_counter() - t0}
    fields = document_fields(cfg)
    plain = fills()
    plain += [{**plain[0], "str": c, "list": [c, "1", "2", "3"]} for c in constants(cfg)[:3]]
    first = hint["fill"] if hint else None
    order = ([first] if first is not None else []) + [i for i in range(len(plain)) if i != first]
    extra: dict[str, Shape] = {k: Shape() for k in (hint or {}).get("extra", []) if k not in fields}
    reason, attempts, copies, distinct = "", 0, 1, False
    raw = raw_fields(cfg, fields)
    variants = [(fi, fields, False) for fi in order] + [(fi, raw, True) for fi in order if raw is not None]
    budget = {False: 0, True: 0}  # builds of the fields as read, and as stored (each its own budget)
    for fi, fields, stored in variants:  # the fields as read, then (when process_docs writes some) as stored
        overrides: dict[str, Any] = dict(hint["overrides"]) if hint and fi == first else {}
        for _ in range(ROUNDS):
            if budget[stored] >= MAX_ATTEMPTS:
                break
            budget[stored] += 1
            attempts += 1
            splits = synthetic_splits(cfg, {**fields, **extra}, plain[fi], overrides, copies, distinct)
            got = _build(tm, entry, splits)
            if isinstance(got, BaseException) and "Sample larger than population" in str(got) and not distinct:
                # a few-shot count the config does not show: a larger pool; then a pool of rows that differ from
                # the evaluated one (a task whose few-shot split is its test split)
                copies, distinct = (32, False) if copies == 1 else (32, True)
                continue
            if isinstance(got, BaseException):
                reason = _reason(got) if fi == order[0] else reason
                if not _answer(got, {**fields, **extra}, extra, overrides, cfg, plain[fi]):
                    break
                continue
            if not got:
                reason = reason if fi != order[0] else "the task kept no document of the synthetic split"
                break
            diffs = compare_instances(got)
            types = sorted({i.request_type for i in got})
            return {"task": name, "status": "equal" if not diffs else "differs", "reason": "; ".join(diffs[:3]),
                    "types": types, "n_instances": len(got), "fill": fi, "attempts": attempts,
                    "extra": sorted(extra), "overrides": overrides, "stored_fields": stored,
                    "s": round(time.perf_counter() - t0, 3)}  # fmt: skip
    return {"task": name, "status": "not built", "reason": reason, "attempts": attempts,
            "s": round(time.perf_counter() - t0, 3)}  # fmt: skip


ROUNDS = 8  # repairs of one filling
MAX_ATTEMPTS = 40  # builds of one task, all fillings


def _build(tm: Any, entry: Any, splits: dict[str, list[Any]]) -> list[Any] | BaseException:
    """lm-eval's instances of the task built on ``splits`` (or the error its code raised)."""
    import datasets

    real = datasets.load_dataset
    patched = _patched_load_dataset(splits)
    datasets.load_dataset = patched
    # a task module that imported the function itself (``from datasets import load_dataset``) gets it too
    bound = [m for n, m in list(sys.modules.items())
             if n.startswith("lm_eval.tasks") and _is_load_dataset(getattr(m, "load_dataset", None), real)]  # fmt: skip
    for mod in bound:
        mod.load_dataset = patched
    unitxt = sys.modules.get("unitxt")  # unitxt's tasks load their data through unitxt's own loader
    real_unitxt = getattr(unitxt, "load_dataset", None)
    if unitxt is not None:
        unitxt.load_dataset = lambda *a, **k: patched(*a, **{x: v for x, v in k.items() if x == "split"})
    try:
        task = tm._factory.build(entry, overrides=None, registry=tm._index)
        task.build_all_requests(limit=1, rank=0, world_size=1)
        return list(task.instances)
    except Exception as exc:  # the task's own code rejected the row
        return exc
    finally:
        datasets.load_dataset = real
        for mod in bound:
            mod.load_dataset = real
        if unitxt is not None:
            unitxt.load_dataset = real_unitxt


def _answer(exc: BaseException, known: dict[str, Any], extra: dict[str, Shape], overrides: dict[str, Any],
            cfg: dict[str, Any], fill: dict[str, Any]) -> bool:  # fmt: skip
    """Change the row as the error asks (a missing field, a field of another kind); False when it asks nothing
    new."""
    row = synthetic_splits(cfg, known, fill, overrides)["test"][0]
    values = {str(x) for v in row.values() for x in (v if isinstance(v, (list, dict)) else [v])}
    values |= {str(y) for v in row.values() if isinstance(v, list) for x in v if isinstance(x, dict)
               for y in x.values()}  # a value inside a list of mappings (doc["messages"][1]["content"])  # fmt: skip
    missing = _missing_key(exc, known)
    if missing and missing not in values:  # a key that is one of the row's values is a lookup of that value
        extra[missing] = Shape()
        return True
    fix = repair(exc, row, templates(cfg))
    if fix is None or (fix[0] in overrides and overrides[fix[0]] == fix[1]):
        return False
    overrides[fix[0]] = fix[1]
    return True


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


_WITH_TOKENIZER: list[Any] = []
RULER_LENGTH = 1024  # RULER's documents are generated at this one length (its default, 4096, takes minutes a task)


def _manager_for(tm: Any, name: str) -> Any:
    """The task manager a task is built with: a task that generates its own data (``custom_dataset``, RULER sizes
    it in tokens) gets a tokenizer and one short target length through lm-eval's ``metadata``, as a user passes
    ``--metadata='{"tokenizer": DIR, "max_seq_lengths": [1024]}'``; every other task the plain one."""
    try:
        cfg = tm._factory._load_full_config(tm._entry(name))
    except Exception:
        return tm
    if "custom_dataset" not in cfg:
        return tm
    if not _WITH_TOKENIZER:
        from lm_eval.tasks import TaskManager

        meta = {"tokenizer": str(word_tokenizer()), "max_seq_lengths": [RULER_LENGTH]}
        _WITH_TOKENIZER.append(TaskManager(metadata=meta))
    return _WITH_TOKENIZER[0]


TASK_TIMEOUT_S = 300


class TaskTimeout(BaseException):  # not an Exception: a task's own ``except Exception`` does not swallow it
    """A task took longer than TASK_TIMEOUT_S to build (a generator of its own data that never ends). Raised again
    every few seconds, in case the task's code catches everything."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise TaskTimeout(f"building the task took more than {TASK_TIMEOUT_S} s")


def worker(names: list[str], out_path: str, deadline: float) -> None:
    """Check ``names`` in this process, appending one JSON line per task to ``out_path``."""
    signal.signal(signal.SIGALRM, _on_alarm)
    logging.disable(logging.CRITICAL)
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets

    datasets.disable_progress_bars()
    from lm_eval.tasks import TaskManager

    tm = TaskManager()
    keep_synthetic_rows()
    stub_unavailable_metrics()
    untrained_punkt()
    import importlib.util

    if importlib.util.find_spec("unitxt") is not None:  # installed beside the venv for the run (its own pins)
        import unitxt  # noqa: F401
    hints: dict[str, dict[str, Any]] = {}
    with open(out_path, "a", encoding="utf-8") as fh:
        for name in names:
            if time.time() > deadline:
                break
            sig = _signature(tm, name)
            signal.setitimer(signal.ITIMER_REAL, TASK_TIMEOUT_S, 5)  # a task whose data generation never ends
            try:
                row = check_task(_manager_for(tm, name), name, hints.get(sig))
            except BaseException as exc:  # a task's own code may raise anything
                if isinstance(exc, KeyboardInterrupt):
                    raise
                row = {"task": name, "status": "not built", "reason": _reason(exc)}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if "fill" in row:
                hints[sig] = {k: row[k] for k in ("fill", "extra", "overrides")}
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
    p.add_argument("--retry-failed", action="store_true",
                   help="check again the tasks of --out that were not built (their new line supersedes the old)")
    args = p.parse_args(argv)
    if args.markdown and not (args.sample or args.only):
        print(summarise(args.out))
        return 0
    from lm_eval.tasks import TaskManager

    logging.disable(logging.CRITICAL)
    tm = TaskManager()
    names = list(args.only or tm.all_subtasks)
    if args.sample:
        names = names[:: args.sample]
    if args.markdown:  # the summary of those tasks only
        print(summarise(args.out, names))
        return 0
    done = set()  # an existing --out is resumed: its tasks are not checked again
    if args.out.exists():
        last = {r["task"]: r for r in _rows(args.out)}
        done = {t for t, r in last.items() if not args.retry_failed or r["status"] in ("equal", "differs")}
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
    print(summarise(args.out, names))
    return 0


def summarise(path: Path, names: list[str] | None = None) -> str:
    """A Markdown summary of a coverage file (of ``names`` only, when given): counts, the reasons, the tasks that
    differ."""
    rows = _rows(path)
    if names is not None:
        wanted = set(names)
        rows = [r for r in rows if r["task"] in wanted]
    total = len(names) if names is not None else len(rows)
    by = collections.Counter(r["status"] for r in rows)
    checked = by["equal"] + by["differs"]
    lines = [f"- subtasks: {total}; reached: {len(rows)}",
             f"- built on one synthetic row and compared: {checked} ({100 * checked / max(total, 1):.1f} %)",
             f"- every request equal: {by['equal']} ({100 * by['equal'] / max(checked, 1):.2f} % of the compared)",
             f"- a request differs: {by['differs']}",
             f"- not built on a synthetic row: {by['not built'] + by['config']}"]  # fmt: skip
    diff_reasons = collections.Counter(r["reason"].split(";")[0] for r in rows if r["status"] == "differs")
    if diff_reasons:
        lines.append("\nRequests that differ (reason: tasks):\n")
        for reason, n in diff_reasons.most_common():
            ex = [r["task"] for r in rows if r["status"] == "differs" and r["reason"].startswith(reason)][:3]
            lines.append(f"- {n} × {reason} (e.g. {', '.join(ex)})")
    failed = [r for r in rows if r["status"] in ("not built", "config")]
    kinds = collections.Counter(_kind(r["reason"]) for r in failed)
    if kinds:
        lines.append("\nWhy not built:\n")
        lines.extend(f"- {n} × {k}" for k, n in kinds.most_common())
    fail = collections.Counter(_short(r["reason"]) for r in failed)
    if fail:
        lines.append("\nNot built on a synthetic row (tasks × the error lm-eval's code raised, digits as N):\n")
        for reason, n in fail.most_common():
            ex = [r["task"] for r in failed if _short(r["reason"]) == reason][:3]
            lines.append(f"- {n} × {reason.replace('|', '/')} (e.g. {', '.join(ex)})")
    types = collections.Counter(t for r in rows for t in r.get("types") or [])
    lines.append("\nRequest types among the compared tasks: " + ", ".join(f"{k} {v}" for k, v in types.most_common()))
    return "\n".join(lines)


def _rows(path: Path) -> list[dict[str, Any]]:
    """The last line of each task in a coverage file (a re-check supersedes the first)."""
    last = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut short when a run was stopped: that task is checked again
            continue
        last[row["task"]] = row
    return list(last.values())


_ABSENT = re.compile(r"ModuleNotFoundError|ImportError|[Pp]lease install|is required|not installed|Offline|"
                     r"Couldn't reach|not available here|Couldn't find a module script|"
                     r"No tokenizer or pretrained|Max retries exceeded|UnavailableMetric")  # fmt: skip
_LM_EVAL_DEFECT = re.compile(r"Context is not a string|has no function")


def _kind(reason: str) -> str:
    """Why a task was not built: lm-eval's own code fails on any document, something absent here, or the
    synthetic row."""
    if _LM_EVAL_DEFECT.search(reason):
        return "lm-eval 0.4.13's own task code fails on any document (a prompt built as a tuple, a missing function)"
    if _ABSENT.search(reason):
        return "needs what is not here (a package, a program, hub data or a metric script, an API gone from datasets 5)"
    return "the task's code did not accept the synthetic row"


def _short(reason: str) -> str:
    return re.sub(r"\d+", "N", reason.replace(os.getcwd() + "/", ""))[:150]


if __name__ == "__main__":
    sys.exit(main())
