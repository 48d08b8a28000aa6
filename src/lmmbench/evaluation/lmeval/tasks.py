"""lm-evaluation-harness task files, read as they are and translated into lmmbench's ``TaskConfig``.

A YAML mapping is lm-eval's when it has no lmmbench ``kind`` and has lm-eval's keys (``output_type``,
``dataset_path``, ``include``, or ``group`` with a ``task`` list). The common subset of lm-eval 0.4
runs on lmmbench's own machinery (the same prompt renderer, few-shot sampler and scorer), so the
numbers are lm-eval's: local ``dataset_path`` json / csv / parquet / a folder with
``dataset_kwargs.data_files``; the splits; ``doc_to_text`` / ``doc_to_choice`` / ``doc_to_target``;
the delimiters; ``num_fewshot`` and ``fewshot_config.sampler``; the four output types; ``until``;
the common filters; ``metric_list``; ``include``. Any other key is one ``UserError`` naming it.
Group files are in ``lmeval_groups``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from lmmbench.core.errors import UserError, user_error_from_validation
from lmmbench.evaluation.lmeval.filters import check_step
from lmmbench.evaluation.task_config import TaskConfig

__all__ = [
    "FunctionRef",
    "LmEvalLoader",
    "find_functions",
    "is_lmeval_mapping",
    "read_lmeval_yaml",
    "resolve_includes",
    "task_from_lmeval",
]

_KIND = {
    "multiple_choice": "multiple_choice",
    "loglikelihood": "loglikelihood",
    "loglikelihood_rolling": "loglikelihood_rolling",
    "generate_until": "generate",
}
_METRIC_KEYS = {
    "metric",
    "aggregation",
    "higher_is_better",
    "ignore_case",
    "ignore_punctuation",
    "ignore_numbers",
    "regexes_to_ignore",
}
_TASK_KEYS = {
    "task", "task_alias", "tag", "output_type", "dataset_path", "dataset_name", "dataset_kwargs",
    "training_split", "validation_split", "test_split", "fewshot_split", "doc_to_text", "doc_to_choice",
    "doc_to_target", "description", "target_delimiter", "fewshot_delimiter", "num_fewshot", "fewshot_config",
    "generation_kwargs", "filter_list", "metric_list", "metadata", "repeats", "should_decontaminate",
    "doc_to_decontamination_query",
}  # fmt: skip
_GEN_KEYS = {"until", "max_gen_toks", "do_sample", "temperature"}


class FunctionRef(str):
    """A ``!function module.name`` value: Python code lmmbench does not run."""


class LmEvalLoader(yaml.SafeLoader):
    """A SafeLoader that reads ``!function`` tags as ``FunctionRef`` (reported, never run)."""


def _function_tag(loader: yaml.SafeLoader, node: yaml.Node) -> FunctionRef:
    return FunctionRef(str(loader.construct_scalar(node)))  # type: ignore[arg-type]


LmEvalLoader.add_constructor("!function", _function_tag)
LMEVAL_YAML_TAGS = {"!function": _function_tag}


def read_lmeval_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping (``!function`` tags read as ``FunctionRef``); syntax errors name the line."""
    if not path.is_file():
        raise UserError(f"{path}: task file not found")
    from lmmbench.config.input_files import load_yaml, read_text

    data = load_yaml(read_text(path, "task file"), path, tags=LMEVAL_YAML_TAGS)  # bounded, tags read not run
    if not isinstance(data, dict):
        raise UserError(f"{path}: a task file must be a mapping")
    return data


def is_lmeval_mapping(data: dict[str, Any]) -> bool:
    """lm-eval's file: no lmmbench ``kind`` and at least one key only lm-eval's files have."""
    if "kind" in data:
        return False
    group_file = "group" in data and isinstance(data.get("task"), list)
    return group_file or any(k in data for k in ("output_type", "dataset_path", "include"))


def resolve_includes(path: Path, data: dict[str, Any], seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """lm-eval's ``include``: the included files (relative to this one) first, this file's keys over them."""
    inc = data.get("include")
    if inc is None:
        return data
    from lmmbench.config.limits import check_limit

    check_limit("include_depth", len(seen) + 1, f"{path}: include chain ({seen[0] if seen else path} -> ...)")
    merged: dict[str, Any] = {}
    for name in [inc] if isinstance(inc, str) else list(inc):
        p = Path(str(name)).expanduser()
        p = p if p.is_absolute() else path.parent / p
        if p.resolve() in seen:
            raise UserError(f"{path}: include '{name}' includes itself")
        merged.update(resolve_includes(p, read_lmeval_yaml(p), (*seen, p.resolve())))
    merged.update({k: v for k, v in data.items() if k != "include"})
    return merged


def find_functions(value: Any, key: str, path: Path) -> None:
    """A ``UserError`` naming the key when ``value`` holds a ``!function`` tag."""
    if isinstance(value, FunctionRef):
        raise UserError(f"{path}: key '{key}': '!function {value}' (Python code) is not supported by lmmbench")
    if isinstance(value, dict):
        for k, v in value.items():
            find_functions(v, f"{key}.{k}", path)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            find_functions(v, f"{key}[{i}]", path)


def _local_file(name: str, base: Path, path: Path) -> Path:
    """A data file as lm-eval's ``datasets`` finds it (the working directory), else next to the task file."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return p
    for candidate in (Path.cwd() / p, base / p):
        if candidate.exists():
            return candidate.resolve()
    raise UserError(f"{path}: data file '{name}' not found (looked in {Path.cwd()} and {base})")


def _split_file(cfg: dict[str, Any], split: str, path: Path) -> tuple[Path, str]:
    """The file (and the format lmmbench reads it with) of one split."""
    dpath = str(cfg.get("dataset_path"))
    kwargs = dict(cfg.get("dataset_kwargs") or {})
    files = kwargs.get("data_files")
    if isinstance(files, (str, list)):
        files = {"train": files}  # `datasets` names an unnamed data_files "train"
    if dpath in ("json", "csv", "parquet"):
        if not isinstance(files, dict) or split not in files:
            raise UserError(f"{path}: dataset_kwargs.data_files has no split '{split}'")
        one = files[split]
        if isinstance(one, list):
            if len(one) != 1:
                raise UserError(f"{path}: data_files.{split}: lmmbench reads one file per split, got {len(one)}")
            one = one[0]
        fmt = {"json": "auto", "csv": "csv_typed", "parquet": "parquet"}[dpath]
        return _local_file(str(one), path.parent, path), fmt
    folder = _local_file(dpath, path.parent, path)
    if not folder.is_dir():
        raise UserError(f"{path}: dataset_path '{dpath}' must be json, csv, parquet or a local folder")
    if (folder / "dataset_dict.json").is_file():
        return folder, "hf_disk"
    if isinstance(files, dict) and split in files:
        one = files[split][0] if isinstance(files[split], list) else files[split]
        return _local_file(str(folder / str(one)), path.parent, path), "auto"
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.stem.split("-")[0] == split)
    if not found:
        raise UserError(f"{path}: no file for split '{split}' in {folder} (name it {split}.jsonl or set data_files)")
    return found[0], "auto"


def _source(cfg: dict[str, Any], split: str, path: Path) -> dict[str, Any]:
    file, fmt = _split_file(cfg, split, path)
    fmt = "csv_typed" if fmt == "auto" and file.suffix.lower() == ".csv" else fmt
    return {"path": str(file), "format": fmt, "split": split if fmt == "hf_disk" else None}


def _metrics(cfg: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    out = []
    for i, m in enumerate(cfg.get("metric_list") or []):
        where = f"{path}: metric_list[{i}]"
        if not isinstance(m, dict) or "metric" not in m:
            raise UserError(f"{where}: each entry needs a 'metric'")
        name = str(m["metric"])
        aggregations = lmeval_aggregations()
        if name not in aggregations:
            raise UserError(f"{where}: metric '{name}' is not supported; supported: {', '.join(aggregations)}")
        extra = set(m) - _METRIC_KEYS
        if extra:
            raise UserError(f"{where}: key(s) {', '.join(sorted(extra))} are not supported")
        agg = m.get("aggregation", aggregations[name])
        if agg != aggregations[name]:
            raise UserError(
                f"{where}: aggregation '{agg}' of '{name}' is not supported (lm-eval's: {aggregations[name]})"
            )
        opts = {k: v for k, v in m.items() if k not in ("metric", "aggregation", "higher_is_better")}
        out.append({"name": name, "options": opts})
    return out


def lmeval_aggregations() -> dict[str, str]:
    """lm-eval metric name -> its aggregation, for every registered metric that declares one (a plugin's
    ``AccuracyMetric(..., lmeval_aggregation=...)`` included)."""
    from lmmbench.metrics.accuracy import ACCURACY_METRICS

    return {name: m.lmeval_aggregation for name in ACCURACY_METRICS.names()
            if (m := ACCURACY_METRICS.get(name)).lmeval_aggregation is not None}  # fmt: skip


def _filters(cfg: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    out = []
    for i, f in enumerate(cfg.get("filter_list") or []):
        where = f"{path}: filter_list[{i}]"
        if not isinstance(f, dict) or "name" not in f or not isinstance(f.get("filter"), list):
            raise UserError(f"{where}: each entry needs a 'name' and a 'filter' list")
        steps = []
        for j, step in enumerate(f["filter"]):
            if not isinstance(step, dict) or "function" not in step:
                raise UserError(f"{where}.filter[{j}]: each step needs a 'function'")
            opts = {k: v for k, v in step.items() if k != "function"}
            check_step(str(step["function"]), opts, f"{where}.filter[{j}]")
            steps.append({"function": str(step["function"]), "options": opts})
        out.append({"name": str(f["name"]), "steps": steps})
    return out


def _generation(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    delim = cfg.get("fewshot_delimiter", "\n\n")
    gen = dict(cfg.get("generation_kwargs") or {"until": [delim]})
    extra = set(gen) - _GEN_KEYS
    if extra:
        raise UserError(f"{path}: generation_kwargs: {', '.join(sorted(extra))} not supported (greedy only)")
    if gen.get("do_sample") or float(gen.get("temperature", 0.0) or 0.0) != 0.0:
        raise UserError(f"{path}: generation_kwargs: only greedy decoding (do_sample: false, temperature: 0) runs")
    until = gen.get("until", [delim])
    until = [until] if isinstance(until, str) else [str(u) for u in until]
    return {"max_tokens": int(gen.get("max_gen_toks", 256)), "stop": until, "strip": False}


def _fewshot(cfg: dict[str, Any], eval_split: str, path: Path) -> dict[str, Any]:
    fs_cfg = dict(cfg.get("fewshot_config") or {})
    extra = set(fs_cfg) - {"sampler", "split"}
    if extra:
        raise UserError(f"{path}: fewshot_config: {', '.join(sorted(extra))} not supported (only sampler, split)")
    sampler = fs_cfg.get("sampler", "default")
    if sampler not in ("default", "first_n"):
        raise UserError(f"{path}: fewshot_config.sampler '{sampler}' is not supported (default, first_n)")
    fs_split = fs_cfg.get("split", cfg.get("fewshot_split"))
    num = int(cfg.get("num_fewshot") or 0)
    out: dict[str, Any] = {"num": num, "seed": 1234, "sampler": sampler}
    # lm-eval: the pool is fewshot_split, else training, else validation, else test; the evaluated
    # document is dropped from the draw only when fewshot_split names the evaluated (test) split
    pool = fs_split or cfg.get("training_split") or cfg.get("validation_split") or cfg.get("test_split")
    out["exclude_eval_doc"] = fs_split == cfg.get("test_split")
    if num > 0 and pool is not None and pool != eval_split:
        out["source"] = _source(cfg, str(pool), path)
    return out


def _check_supported(path: Path, raw: dict[str, Any]) -> str:
    """One ``UserError`` for the first thing lmmbench does not run; the evaluated split otherwise."""
    for k, v in raw.items():
        find_functions(v, k, path)
    unknown = sorted(k for k in raw if k not in _TASK_KEYS)
    if unknown:
        raise UserError(
            f"{path}: lm-eval key '{unknown[0]}' is not supported by lmmbench"
            + (f" (nor {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
            + "; see docs/eval.md 'lm-evaluation-harness task files'"
        )
    if "task" not in raw:
        raise UserError(f"{path}: an lm-eval task file needs 'task' (its name)")
    out_type = str(raw.get("output_type", "generate_until"))
    if out_type not in _KIND:
        raise UserError(f"{path}: output_type '{out_type}' is not supported; supported: {', '.join(_KIND)}")
    if raw.get("dataset_name") is not None:
        raise UserError(f"{path}: dataset_name is not supported (local files only)")
    if int(raw.get("repeats", 1) or 1) != 1:
        raise UserError(f"{path}: repeats other than 1 are not supported")
    extra_kwargs = set(raw.get("dataset_kwargs") or {}) - {"data_files", "trust_remote_code"}
    if extra_kwargs:
        raise UserError(f"{path}: dataset_kwargs: {', '.join(sorted(extra_kwargs))} not supported (only data_files)")
    if "dataset_path" not in raw:
        raise UserError(f"{path}: an lm-eval task file needs 'dataset_path'")
    eval_split = raw.get("test_split") or raw.get("validation_split")
    if eval_split is None:
        raise UserError(f"{path}: the task needs a test_split or a validation_split")
    description = str(raw.get("description") or "")
    if "{{" in description or "{%" in description:
        raise UserError(f"{path}: a templated 'description' is not supported")
    for key in ("doc_to_text", "doc_to_choice"):
        if isinstance(raw.get(key), int):
            raise UserError(f"{path}: an integer '{key}' (multiple inputs) is not supported")
    if out_type != "generate_until" and raw.get("generation_kwargs") is not None:
        raise UserError(f"{path}: generation_kwargs apply to output_type generate_until only")
    return str(eval_split)


def task_from_lmeval(path: Path, raw: dict[str, Any]) -> TaskConfig:
    """The ``TaskConfig`` of one lm-eval task mapping (``include`` already resolved)."""
    eval_split = _check_supported(path, raw)
    out_type = str(raw.get("output_type", "generate_until"))
    description = str(raw.get("description") or "")
    fields: dict[str, Any] = {
        "task": str(raw["task"]),
        "version": (raw.get("metadata") or {}).get("version", 1),
        "kind": _KIND[out_type],
        "description": description,
        "data": _source(raw, eval_split, path),
        "doc_to_text": raw.get("doc_to_text") or "",
        "doc_to_target": raw.get("doc_to_target", ""),
        "doc_to_choice": raw.get("doc_to_choice"),
        "target_delimiter": raw.get("target_delimiter", " "),
        "fewshot_delimiter": raw.get("fewshot_delimiter", "\n\n"),
        "fewshot": _fewshot(raw, eval_split, path),
        "metrics": _metrics(raw, path),
        "filters": _filters(raw, path),
        "base_dir": path.parent,
        "source_file": str(path),
    }
    if out_type == "generate_until":
        fields["generation"] = _generation(raw, path)
    try:
        cfg = TaskConfig.model_validate(fields)
    except ValidationError as exc:
        raise user_error_from_validation(exc, f"{path}: cannot read this lm-eval task", field="'{}'") from None
    from lmmbench.metrics.accuracy import get_metric

    for m in cfg.default_metrics():
        get_metric(m.name, cfg.kind, f"{path}: metric_list")
    if cfg.kind == "multiple_choice" and cfg.doc_to_choice is None:
        raise UserError(f"{path}: doc_to_choice is required for output_type multiple_choice")
    return cfg
