"""``lmmbench bench ais ARGS``: an ``ais_bench ARGS`` command line (AISBench 3.1) run by lmmbench.

The flow follows AISBench's ``cli/task_manager.py`` / ``cli/workers.py``: ``--mode all`` is infer, eval and
viz; ``infer`` only infers; ``eval`` scores the predictions of a ``--reuse`` folder and summarises; ``viz``
summarises a ``--reuse`` folder's results. The run folder is ``<work-dir>/<timestamp>/`` (``--work-dir`` default
``outputs/default``; ``--reuse`` takes the latest folder or the one named) with AISBench's layout:
``configs/<time>_<pid>.py`` (the resolved config), ``logs/{infer,eval}/<model>/<data set>.out``,
``predictions/<model>/<data set>.jsonl``, ``results/<model>/<data set>.json`` and
``summary/summary_<time>.{txt,csv,md}``. Tasks (one per model and data set; one per model and inferencer with
``--merge-ds``) run ``--max-num-workers`` at a time.
"""

from __future__ import annotations

import os
import pprint
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.config.dropins.aisbench_args import AisArgs, parse_ais_args
from lmmbench.config.dropins.aisbench_configs import (
    AisDataset,
    AisModel,
    dataset_from_dict,
    find_config,
    load_datasets,
    load_models,
    plain,
    prompt_version,
)
from lmmbench.config.dropins.aisbench_reader import read_config_file
from lmmbench.core.errors import UserError

__all__ = ["AisRun", "run_bench_ais"]


@dataclass
class AisRun:
    """What a run did: its folder, the text AISBench prints, request counts."""

    run_dir: Path | None = None
    text: str = ""
    sent: int = 0
    ok: int = 0
    inferred: bool = False
    interrupted: bool = False
    scored: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


def _search(args: AisArgs) -> str:
    from lmmbench.core.errors import require

    require("tabulate", "eval")
    import tabulate

    def where(kind: str, name: str) -> str:
        return str(find_config(kind, name, args.config_dir, args.aisbench_root).resolve())

    table = [["Task Type", "Task Name", "Config File Path"]]
    table += [["--models", name, where("models", name)] for name in args.models]
    table += [["--datasets", arg.split("/", 1)[0], where("datasets", arg.split("/", 1)[0])] for arg in args.datasets]
    if args.summarizer:
        name = args.summarizer.split("/", 1)[0]
        table.append(["--summarizer", name, where("summarizers", name)])
    return str(tabulate.tabulate(table, headers="firstrow", tablefmt="fancy_grid", stralign="left"))


def _from_config_file(args: AisArgs) -> tuple[list[AisModel], list[AisDataset]]:
    """The positional config file: its ``models`` and ``datasets`` lists (each item a dict(...))."""
    from lmmbench.config.dropins.aisbench_configs import _model

    file = Path(str(args.config))
    values = read_config_file(file, args.aisbench_root)
    extra = sorted(k for k in values if k not in ("models", "datasets", "summarizer", "work_dir")
                   and not k.startswith("_") and type(values[k]).__name__ != "ImportedName"
                   and not k.endswith(("_datasets", "_cfg", "_config", "_models")))  # fmt: skip
    if extra:
        raise UserError(f"{file}: top-level setting {extra[0]} is not honoured by lmmbench's AISBench drop-in "
                        "(honoured: models, datasets, summarizer, work_dir)")
    for key in ("models", "datasets"):
        if not isinstance(values.get(key), list):
            raise UserError(f"{file}: no `{key} = [...]` in the config file")
    if values.get("work_dir") and not args.work_dir:
        args.work_dir = str(values["work_dir"])
    return [_model(m, file) for m in values["models"]], [dataset_from_dict(d, file) for d in values["datasets"]]


def _summarizer(args: AisArgs) -> list[Any] | None:
    """The rows the summarizer asks for (its ``dataset_abbrs``), or None for every data set of the run."""
    if args.summarizer in (None, "example", "example/summarizer"):
        return None  # AISBench's default summarizer: its summary groups name no data set lmmbench runs
    name, key = args.summarizer.split("/", 1) if "/" in args.summarizer else (args.summarizer, "summarizer")
    file = find_config("summarizers", name, args.config_dir, args.aisbench_root)
    cfg = read_config_file(file, args.aisbench_root).get(key)
    if not isinstance(cfg, dict):
        raise UserError(f"{file}: no `{key} = dict(...)` in the summarizer config")
    from lmmbench.config.dropins.aisbench_configs import type_name

    extra = sorted(set(cfg) - {"attr", "type", "dataset_abbrs", "summary_groups"})
    if extra or cfg.get("summary_groups") or ("type" in cfg and type_name(cfg["type"]) != "DefaultSummarizer") \
            or cfg.get("attr", "accuracy") != "accuracy":  # fmt: skip
        what = extra[0] if extra else ("summary_groups" if cfg.get("summary_groups") else "type/attr")
        raise UserError(f"{file}: summarizer field {what} is not honoured by lmmbench's AISBench drop-in (honoured: "
                        "attr='accuracy', DefaultSummarizer, dataset_abbrs)")
    return list(cfg.get("dataset_abbrs") or []) or None


def _check_kinds(models: list[AisModel], datasets: list[AisDataset], perf: bool) -> None:
    """The synthetic data set is AISBench's perf workload (it has no answers to score), and AISBench's
    ``fill_model_path_if_datasets_need`` wants the first model's ``path`` with it (lmmbench loads no tokenizer)."""
    for d in datasets:
        if d.kind == "synthetic" and not perf:
            raise UserError(f"{d.file}: SyntheticDataset ({d.abbr}) is a perf workload: run it with --mode perf")
        if d.kind == "synthetic" and models and not models[0].path:
            raise UserError(f"model {models[0].abbr}: [path] in model config is required for the synthetic data set "
                            f"{d.abbr} (AISBench's check; its tokenizer folder)")


def _perf_stats(args: AisArgs) -> list[str] | None:
    """The statistics of a perf summarizer config (``configs/summarizers/perf/default_perf.py``: ``calculator=
    dict(type=DefaultPerfMetricCalculator, stats_list=[...])``); None for AISBench's default. A summarizer whose
    ``attr`` is not ``performance`` is replaced by the default perf summarizer, as ``PerfViz.update_cfg`` does."""
    if args.summarizer is None:
        return None
    name, key = args.summarizer.split("/", 1) if "/" in args.summarizer else (args.summarizer, "summarizer")
    file = find_config("summarizers", name, args.config_dir, args.aisbench_root)
    cfg = read_config_file(file, args.aisbench_root).get(key)
    if not isinstance(cfg, dict) or cfg.get("attr") != "performance" or cfg.get("type") is None:
        return None
    from lmmbench.config.dropins.aisbench_configs import type_name

    calc = cfg.get("calculator") or {}
    extra = sorted(set(cfg) - {"attr", "type", "calculator", "dataset_abbrs", "summary_groups", "prompt_db"})
    bad = (type_name(cfg["type"]) != "DefaultPerfSummarizer" or not isinstance(calc, dict)
           or type_name(calc.get("type", "DefaultPerfMetricCalculator")) != "DefaultPerfMetricCalculator"
           or set(calc) - {"type", "stats_list"})  # fmt: skip
    if extra or bad:
        raise UserError(f"{file}: perf summarizer {extra[0] if extra else 'type/calculator'} is not honoured by "
                        "lmmbench's AISBench drop-in (honoured: DefaultPerfSummarizer with DefaultPerfMetricCalculator "
                        "and its stats_list; StablePerfMetricCalculator is not supported this round)")
    stats = calc.get("stats_list")
    return [str(s) for s in stats] if isinstance(stats, list) else None


def _run_perf(args: AisArgs, models: list[AisModel], datasets: list[AisDataset], run_dir: Path, run: AisRun,
              stats: list[str] | None) -> AisRun:  # fmt: skip
    """``--mode perf``: the load, then the perf summary; ``perf_viz``: the summary of a --reuse folder."""
    from lmmbench.sessions.dropins.ais_perf import perf_infer, perf_summarise
    from lmmbench.sessions.dropins.ais_tasks import task_log

    if args.mode == "perf":
        run.inferred = True
        run.sent, run.ok = perf_infer(args, models, datasets, run_dir,
                                      lambda m, abbr: task_log(args, run_dir, "infer", m, abbr))  # fmt: skip
    run.text = perf_summarise(models, datasets, run_dir, stats)
    return run


def _run_dir(args: AisArgs) -> Path:
    root = Path(args.work_dir or os.path.join("outputs", "default"))
    stamp = args.time_str
    if args.reuse:
        if args.reuse == "latest":
            found = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
            if found:
                stamp = found[-1]
        else:
            stamp = args.reuse
            if not (root / stamp).is_dir():
                raise UserError(f"--reuse {stamp}: no folder {root / stamp}")
    elif args.mode in ("eval", "viz", "perf_viz"):
        raise UserError(f"--mode {args.mode} works on the outputs of an earlier run: add --reuse (latest) or "
                        "--reuse TIMESTAMP")
    return root / stamp


def _dump_config(run_dir: Path, args: AisArgs, models: list[AisModel], datasets: list[AisDataset]) -> Path:
    """``configs/<time>_<pid>.py``: the resolved config as Python literals (readable by the static reader)."""
    path = run_dir / "configs" / f"{args.time_str}_{os.getpid()}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    from lmmbench.core.secrets import redact_config, register_secret

    for m in models:
        register_secret(m.api_key)
    parts = {"models": [redact_config(m.raw) for m in models], "datasets": [d.raw for d in datasets],
             "work_dir": str(run_dir), "cli_args": args.as_cli_args()}  # fmt: skip
    path.write_text("".join(f"{k} = {pprint.pformat(plain(v), width=110, sort_dicts=False)}\n" for k, v in
                            parts.items()), encoding="utf-8")  # fmt: skip
    return path


def run_bench_ais(argv: list[str]) -> AisRun:
    """Run ``ais_bench argv``; returns what was done and the text to print."""
    args = parse_ais_args(argv)
    if args.search:
        return AisRun(text=_search(args))
    if args.dump_extract_rate and not args.dump_eval_details:
        raise UserError("--dump-extract-rate acts with --dump-eval-details (AISBench computes it from the details)")
    if args.config:
        if args.models or args.datasets:
            raise UserError("give a config file or --models/--datasets, not both")
        models, datasets = _from_config_file(args)
    else:
        if not args.models or not args.datasets:
            raise UserError("give --models and --datasets (or a config file); custom data sets are not supported")
        models = load_models(args.models, args.config_dir, args.aisbench_root)
        datasets = load_datasets(args.datasets, args.config_dir, args.aisbench_root)
    perf = args.mode in ("perf", "perf_viz")
    _check_kinds(models, datasets, perf)
    required = None if perf else _summarizer(args)
    stats = _perf_stats(args) if perf else None
    run_dir = _run_dir(args)
    _dump_config(run_dir, args, models, datasets)
    run = AisRun(run_dir=run_dir)
    from lmmbench.sessions.dropins.ais_tasks import dry_run_text, evaluate_all, infer_all, summarise

    if args.dry_run:
        run.text = dry_run_text(args, models, datasets)
        return run
    if perf:
        return _run_perf(args, models, datasets, run_dir, run, stats)
    if args.mode in ("all", "infer"):
        run.inferred = True
        run.sent, run.ok = infer_all(args, models, datasets, run_dir)
    if args.mode in ("all", "eval"):
        run.scored = evaluate_all(args, models, datasets, run_dir)
    if args.mode in ("all", "eval", "viz"):
        run.text = summarise(args, models, [(d.abbr, prompt_version(d)) for d in datasets], run_dir, required)
    return run
