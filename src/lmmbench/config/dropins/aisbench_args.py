"""``ais_bench ARGS`` as AISBench 3.1 parses them (``ais_bench/benchmark/cli/argument_parser.py``), for
``lmmbench bench ais``.

Every flag of AISBench's parser is here with its name, default and check; each is honoured, or refused by name
with the reason when it is given (exit 2, one line). ``--aisbench-root`` is lmmbench's own: the folder holding an
AISBench installation's ``ais_bench`` package, whose ``ais_bench/benchmark/configs`` folder is searched after
``--config-dir`` (AISBench searches its own installed configs there).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["AIS_MODES", "REFUSED_FLAGS", "AisArgs", "parse_ais_args"]

AIS_MODES = ("all", "infer", "eval", "viz", "perf", "perf_viz", "judge", "infer_judge")

#: flags refused when given, with the reason
REFUSED_FLAGS: dict[str, str] = {
    "max_workers_per_gpu": "--max-workers-per-gpu places local (in-process) models on GPUs; lmmbench's AISBench "
                           "drop-in runs service models (VLLMCustomAPI, VLLMCustomAPIChat) only",
    "pressure": "--pressure (AISBench's pressure test) is not supported by lmmbench's AISBench drop-in this round; "
                "`lmmbench perf --duration` is lmmbench's own sustained load test",
    "pressure_time": "--pressure-time acts with --pressure, which lmmbench's AISBench drop-in does not support",
    "custom_dataset_path": "custom data sets (--custom-dataset-*) are not supported by lmmbench's AISBench drop-in "
                           "this round; give --datasets with a gsm8k or synthetic config",
    "custom_dataset_meta_path": "custom data sets (--custom-dataset-*) are not supported this round",
    "custom_dataset_data_type": "custom data sets (--custom-dataset-*) are not supported this round",
    "custom_dataset_infer_method": "custom data sets (--custom-dataset-*) are not supported this round",
}

_REFUSED_MODES = {
    "judge": "--mode judge runs judge models (judge_infer_cfg), which lmmbench's AISBench drop-in does not "
             "support this round",
    "infer_judge": "--mode infer_judge runs judge models (judge_infer_cfg), which lmmbench's AISBench drop-in "
                   "does not support this round",
}


@dataclass
class AisArgs:
    """The parsed command line (AISBench's names) and the run's time label (``YYYYmmdd_HHMMSS``)."""

    config: str | None = None
    models: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)
    summarizer: str | None = None
    debug: bool = False
    search: bool = False
    dry_run: bool = False
    mode: str = "all"
    reuse: str | None = None
    work_dir: str | None = None
    config_dir: str = "configs"
    max_num_workers: int = 1
    num_prompts: int | None = None
    num_warmups: int = 1
    merge_ds: bool = False
    dump_eval_details: bool = False
    dump_extract_rate: bool = False
    aisbench_root: Path | None = None
    time_str: str = ""
    given: set[str] = field(default_factory=set)

    def as_cli_args(self) -> dict[str, Any]:
        """The flags as AISBench records them in its dumped config (``cli_args``)."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k not in ("given", "time_str")}  # fmt: skip


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UserError(f"bench ais: {message}")


def _int_at_least(name: str, low: int, high: int | None = None, allow_none: bool = False) -> Any:
    def check(value: str) -> int | None:
        if allow_none and value.lower() == "none":
            return None
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"`{name}` must be an integer, but got {value!r}") from None
        if number < low:
            raise argparse.ArgumentTypeError(f"`{name}` must be >= {low}, but got {number}")
        if high is not None and number > high:
            raise argparse.ArgumentTypeError(f"`{name}` must be <= {high}, but got {number}")
        return number

    return check


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="lmmbench bench ais", description="AISBench 3.1's command line (ais_bench ARGS), run by "
                 "lmmbench: service models on gsm8k and the synthetic perf data set.")  # fmt: skip
    add = ap.add_argument
    add("config", nargs="?", help="Benchmark config file path (a file defining models and datasets)")
    add("--models", nargs="+", default=None, help="model config names (searched in --config-dir/models, then "
        "the AISBench installation's configs)")  # fmt: skip
    add("--datasets", nargs="+", default=None, help="data set config names (NAME or NAME/SUFFIX)")
    add("--summarizer", default=None, help="summarizer config name (default: example)")
    add("--debug", action="store_true", help="log to the terminal instead of logs/")
    add("-s", "--search", action="store_true", help="print where --models/--datasets/--summarizer resolve, and exit")
    add("--dry-run", action="store_true", help="resolve configs, write configs/, print the tasks; send nothing")
    add("-m", "--mode", choices=AIS_MODES, default="all", help="all | infer | eval | viz | perf | perf_viz")
    add("-r", "--reuse", nargs="?", const="latest", default=None, help="reuse a run folder (latest or TIMESTAMP)")
    add("-w", "--work-dir", default=None, help="output root (default outputs/default)")
    add("--config-dir", default="configs", help="custom config folder searched first (default: configs)")
    max_workers = max(1, int((os.cpu_count() or 1) * 0.8))
    add("--max-num-workers", type=_int_at_least("--max-num-workers", 1, max_workers), default=1,
        help="tasks (model x data set) run in parallel")  # fmt: skip
    add("--max-workers-per-gpu", type=_int_at_least("--max-workers-per-gpu", 1), default=1, help="refused: local "
        "models only")  # fmt: skip
    add("--num-prompts", type=_int_at_least("--num-prompts", 1, allow_none=True), default=None,
        help="only the first N prompts of each data set")  # fmt: skip
    add("--num-warmups", type=_int_at_least("--num-warmups", 0), default=1, help="warm-up requests per task")
    add("--merge-ds", action="store_true", help="one task per model for data sets with the same inferencer")
    add("--dump-eval-details", action="store_true", help="per-sample details in results/")
    add("--dump-extract-rate", action="store_true", help="extract_rate in results/ (with --dump-eval-details)")
    add("--pressure", action="store_true", help="refused: pressure test")
    add("--pressure-time", type=_int_at_least("--pressure-time", 1, 86400), default=15, help="refused")
    add("--custom-dataset-path", default=None, help="refused: custom data sets")
    add("--custom-dataset-meta-path", default=None, help="refused")
    add("--custom-dataset-data-type", choices=["mcq", "qa"], default=None, help="refused")
    add("--custom-dataset-infer-method", choices=["gen"], default=None, help="refused")
    add("--aisbench-root", type=Path, default=None, help="lmmbench's own: the folder holding an AISBench "
        "installation's ais_bench package (its configs are searched after --config-dir)")  # fmt: skip
    return ap


def parse_ais_args(argv: list[str]) -> AisArgs:
    """``argv`` parsed as AISBench parses it; a refused flag or mode is one ``UserError`` naming it."""
    ap = _parser()
    if any(a in ("-h", "--help") for a in argv):
        ap.print_help()
        raise SystemExit(0)
    ns = ap.parse_args(argv)
    defaults = vars(ap.parse_args([]))
    given = {k for k, v in vars(ns).items() if v != defaults[k]}
    for name, why in REFUSED_FLAGS.items():
        if name in given:
            raise UserError(f"--{name.replace('_', '-')}: {why}")
    if ns.mode in _REFUSED_MODES:
        raise UserError(_REFUSED_MODES[ns.mode])
    if ns.aisbench_root is not None and not (ns.aisbench_root / "ais_bench").is_dir():
        raise UserError(f"--aisbench-root {ns.aisbench_root}: no ais_bench package folder in it (give the folder "
                        "that holds ais_bench/, e.g. a site-packages folder or a checkout of AISBench/benchmark)")
    out = AisArgs(config=ns.config, models=list(ns.models or []), datasets=list(ns.datasets or []),
                  summarizer=ns.summarizer, debug=ns.debug or ns.dry_run, search=ns.search, dry_run=ns.dry_run,
                  mode=ns.mode, reuse=ns.reuse, work_dir=ns.work_dir, config_dir=ns.config_dir,
                  max_num_workers=ns.max_num_workers, num_prompts=ns.num_prompts, num_warmups=ns.num_warmups,
                  merge_ds=ns.merge_ds, dump_eval_details=ns.dump_eval_details,
                  dump_extract_rate=ns.dump_extract_rate, aisbench_root=ns.aisbench_root,
                  time_str=_dt.datetime.now().strftime("%Y%m%d_%H%M%S"), given=given)  # fmt: skip
    if out.mode == "perf" and out.reuse:  # AISBench: perf with --reuse loads the metrics of the reused folder
        out.mode = "perf_viz"
    return out
