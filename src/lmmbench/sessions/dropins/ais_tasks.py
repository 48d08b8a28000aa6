"""The stages of ``lmmbench bench ais`` over the run's tasks: infer (``cli/workers.py`` ``Infer``: one task per
model and data set, or per model and inferencer with ``--merge-ds``, ``--max-num-workers`` at a time), eval
(``Eval``: one result file per model and data set) and viz (``AccViz``: the summary)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lmmbench.config.dropins.aisbench_args import AisArgs
from lmmbench.config.dropins.aisbench_configs import AisDataset, AisModel
from lmmbench.core.errors import UserError
from lmmbench.sessions.dropins.ais_requests import AisItem, load_items, request_body

__all__ = ["dry_run_text", "evaluate_all", "infer_all", "summarise", "task_log"]


class _Log:
    """A task's log: ``logs/<stage>/<model>/<data set>.out``, or the terminal with --debug."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def __call__(self, line: str) -> None:
        if self.path is None:
            import sys

            print(line, file=sys.stderr)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def task_log(args: AisArgs, run_dir: Path, stage: str, model: AisModel, abbr: str) -> _Log:
    """A task's log writer (``logs/<stage>/<model>/<abbr>.out``; the terminal with --debug)."""
    return _Log(None if args.debug else run_dir / "logs" / stage / model.abbr / f"{abbr}.out")


def _groups(args: AisArgs, datasets: list[AisDataset]) -> list[list[AisDataset]]:
    """Data sets per task: one each, or merged by inferencer (``--merge-ds``, AISBench's ``_merge_datasets``)."""
    if not args.merge_ds:
        return [[d] for d in datasets]
    groups: dict[str, list[AisDataset]] = {}
    for d in datasets:
        key = d.kind + json.dumps(d.raw["infer_cfg"]["inferencer"], sort_keys=True)
        groups.setdefault(key, []).append(d)
    return list(groups.values())


def _done_ids(path: Path) -> set[int]:
    """Ids already predicted in a reused folder (AISBench's infer skips them)."""
    if not path.is_file():
        return set()
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.add(int(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def infer_all(args: AisArgs, models: list[AisModel], datasets: list[AisDataset], run_dir: Path) -> tuple[int, int]:
    """Every task's requests; returns (sent, succeeded)."""
    from lmmbench.sessions.dropins.ais_infer import InferJob, run_infer_job

    jobs = []
    for model in models:
        pred_dir = run_dir / "predictions" / model.abbr
        for group in _groups(args, datasets):
            items: list[tuple[str, AisItem]] = []
            for ds in group:
                done = _done_ids(pred_dir / f"{ds.abbr}.jsonl")
                items += [(ds.abbr, i) for i in load_items(ds, model, args.aisbench_root, args.num_prompts)
                          if i.index not in done]  # fmt: skip
                (pred_dir / f"{ds.abbr}_failed.jsonl").unlink(missing_ok=True)  # retried now
            jobs.append((InferJob(model.model_copy(), items, pred_dir, args.num_warmups),
                         task_log(args, run_dir, "infer", model, group[0].abbr)))  # fmt: skip

    def run(job: tuple[Any, _Log]) -> tuple[int, int]:
        infer_job, log = job
        if not infer_job.items:
            log("Get no data to infer, task finished")
            return 0, 0
        ok, failed = run_infer_job(infer_job, log)
        log(f"Task [{infer_job.model.abbr}]: {ok} succeeded, {failed} failed")
        return ok + failed, ok

    with ThreadPoolExecutor(max_workers=args.max_num_workers) as pool:
        counts = list(pool.map(run, jobs))
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def evaluate_all(args: AisArgs, models: list[AisModel], datasets: list[AisDataset],
                 run_dir: Path) -> dict[str, dict[str, dict[str, Any]]]:  # fmt: skip
    """Score every (model, data set); a pair without predictions is logged and skipped, as AISBench does."""
    from lmmbench.sessions.dropins.ais_eval import score_task

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for model in models:
        for ds in datasets:
            log = task_log(args, run_dir, "eval", model, ds.abbr)
            items = load_items(ds, model, args.aisbench_root, args.num_prompts)
            result = score_task(model, ds, items, run_dir, args.dump_eval_details, args.dump_extract_rate)
            if result is None:
                log(f"Task [{model.abbr}/{ds.abbr}]: No predictions found.")
                continue
            log(f"Task [{model.abbr}/{ds.abbr}]: {({k: v for k, v in result.items() if k != 'details'})}")
            out.setdefault(model.abbr, {})[ds.abbr] = result
    return out


def summarise(args: AisArgs, models: list[AisModel], datasets: list[tuple[str, str]], run_dir: Path,
              required: list[Any] | None) -> str:  # fmt: skip
    """Write ``summary/summary_<time>.*`` from the run folder's result files; returns the printed text."""
    from lmmbench.reports.ais_summary import write_summary

    names = list(dict.fromkeys(m.summarizer_abbr or m.abbr for m in models))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for model in models:
        for abbr, _version in datasets:
            path = run_dir / "results" / model.abbr / f"{abbr}.json"
            if path.is_file():
                try:
                    results.setdefault(model.summarizer_abbr or model.abbr, {})[abbr] = json.loads(path.read_text())
                except ValueError:
                    raise UserError(f"{path}: not a JSON result file") from None
    rows = datasets if required is None else [(r if isinstance(r, str) else r[0], dict(datasets).get(
        r if isinstance(r, str) else r[0], "-")) for r in required]  # fmt: skip
    _txt, printed = write_summary(run_dir / "summary", args.time_str, names, rows, results)
    return printed


def dry_run_text(args: AisArgs, models: list[AisModel], datasets: list[AisDataset]) -> str:
    """What a run would send (``--dry-run``): per task, the endpoint, the prompt count and the first body."""
    lines = []
    for model in models:
        for group in _groups(args, datasets):
            for ds in group:
                items = load_items(ds, model, args.aisbench_root, args.num_prompts)
                first = request_body(model, items[0].prompt, model.max_out_len) if items else None
                lines.append(f"[dry-run] {model.abbr}/{ds.abbr}: {len(items)} prompts -> POST {model.endpoint()} "
                             f"(concurrency {model.batch_size}); first body: {json.dumps(first, ensure_ascii=False)}")
    return "\n".join(lines)
