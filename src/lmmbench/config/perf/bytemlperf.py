"""ByteMLPerf's LLM workload files, in both layouts ByteMLPerf has used, read as its launcher reads them.

Today's layout (``byte_infer_perf/llm_perf/workloads/*.json`` since July 2024) nests its fields::

    {"model": "chatglm2-6b", "test_accuracy": true, "min_tp_size": 1,
     "accuracy_config": {"dataset": "llm_perf/datasets/merged_52_test.csv", "min_new_tokens": 1, "max_new_tokens": 512},
     "test_perf": true,
     "perf_config": {"tp_sizes": [1, 2, 4, 8], "batch_sizes": [1, 4, 8], "input_tokens": [1024, 2048],
                     "output_tokens": 200, "perf_time": 100}}

The layout of ByteMLPerf's design document is flat (``model``, ``test_accuracy``, ``test_perf``,
``min_new_tokens``, ``max_new_tokens``, ``tp_sizes``, ``batch_sizes``, ``input_tokens``, ``dataset``,
``perf_time``). Both load into one ``ByteMLPerfWorkload``. A ``.json`` file is parsed as JSON (``1e0`` is a
number, ``true`` is not); a field lmmbench does not know is named alone, with the nearest known one.
ByteMLPerf's launcher (``launch.py``) takes ``test_accuracy`` / ``test_perf`` as false when absent and
requires ``min_tp_size``; the flat layout predates both, so there ``test_perf`` defaults to true and every
tp size runs.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lmmbench.core.errors import UserError

__all__ = ["BYTEMLPERF_KEYS", "WORKLOAD_FIELDS", "ByteMLPerfWorkload", "is_bytemlperf_workload", "parse_bytemlperf",
           "read_json_file", "refuse_unknown"]

_NESTED_TOP = ("model", "test_accuracy", "test_perf", "min_tp_size", "accuracy_config", "perf_config")
_ACCURACY = ("dataset", "min_new_tokens", "max_new_tokens")
_PERF = ("tp_sizes", "batch_sizes", "input_tokens", "output_tokens", "perf_time")
_FLAT = ("model", "test_accuracy", "test_perf", "min_tp_size", "min_new_tokens", "max_new_tokens", "tp_sizes",
         "batch_sizes", "input_tokens", "dataset", "perf_time")  # fmt: skip
#: Every field either layout has (nested ones as ``section.key``), for the option inventory.
WORKLOAD_FIELDS = tuple(dict.fromkeys([*(k for k in _NESTED_TOP if not k.endswith("_config")),
                                       *(f"accuracy_config.{k}" for k in _ACCURACY),
                                       *(f"perf_config.{k}" for k in _PERF), *_FLAT]))  # fmt: skip
#: Keys only a ByteMLPerf workload has (a mapping with any of them is read as one).
BYTEMLPERF_KEYS = frozenset({"accuracy_config", "perf_config", "min_tp_size", "tp_sizes", "batch_sizes", "perf_time",
                             "test_perf", "test_accuracy", "min_new_tokens", "max_new_tokens"})  # fmt: skip


@dataclass(frozen=True)
class ByteMLPerfWorkload:
    """One ByteMLPerf workload as its launcher uses it."""

    path: Path
    layout: Literal["nested", "flat"]
    model: str | None
    test_accuracy: bool
    test_perf: bool
    min_tp_size: int | None  # None: the flat layout without one (every tp size runs)
    tp_sizes: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    input_tokens: tuple[int, ...]
    perf_time: float | None
    output_tokens: int | None  # nested: perf_config.output_tokens, the perf points' generation length
    min_new_tokens: int | None  # nested: accuracy_config's (the accuracy run); flat: the perf points' too
    max_new_tokens: int | None
    dataset: str | None

    @property
    def task(self) -> str:
        """ByteMLPerf's task name: the workload file's name without ``.json`` (its report's ``Model``)."""
        return self.path.stem

    @property
    def perf_tp_sizes(self) -> list[int]:
        """The tp sizes the launcher runs: those at or above ``min_tp_size``, in the file's order."""
        return [tp for tp in self.tp_sizes if self.min_tp_size is None or tp >= self.min_tp_size]

    @property
    def accuracy_tp(self) -> int:
        """The tp size of the accuracy run: ``min_tp_size`` (the smallest tp size in the flat layout)."""
        return self.min_tp_size if self.min_tp_size is not None else min(self.tp_sizes, default=1)


def read_json_file(path: Path, text: str) -> Any:
    """A JSON document, strictly: NaN / Infinity refused, one line naming the file on a syntax error."""

    def _constant(name: str) -> Any:
        raise UserError(f"{path}: {name} is not a JSON number; write a finite number")

    try:
        return json.loads(text, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to read") from None


def is_bytemlperf_workload(data: dict[str, Any]) -> bool:
    """True for a mapping with any key only a ByteMLPerf workload has."""
    return bool(BYTEMLPERF_KEYS & set(data))


def refuse_unknown(path: Path, where: str, mapping: dict[str, Any], known: tuple[str, ...] | list[str],
                   hint: str = "", list_known: bool = True) -> None:  # fmt: skip
    """One line naming only the keys of ``mapping`` not in ``known``, each with the nearest known one."""
    unknown = [k for k in mapping if k not in known]
    if not unknown:
        return
    parts = []
    for k in unknown:
        near = difflib.get_close_matches(str(k), list(known), n=1)
        parts.append(f"'{k}'" + (f" (did you mean '{near[0]}'?)" if near else ""))
    tail = f"; known: {', '.join(known)}" if list_known else ""
    raise UserError(f"{path}: {where}: unknown field(s) {', '.join(parts)}{hint}{tail}")


def _int(path: Path, where: str, value: Any, minimum: int = 1) -> int:
    """A JSON integer (``1e0`` counts: it is the number 1; a bool does not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{path}: '{where}' must be an integer >= {minimum}, not {json.dumps(value)[:40]}")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise UserError(f"{path}: '{where}' must be a whole number, not {value!r}")
    if value < minimum:
        raise UserError(f"{path}: '{where}' must be an integer >= {minimum}, not {int(value)}")
    return int(value)


def _ints(path: Path, where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{path}: '{where}' must be a non-empty list of positive integers, e.g. [1, 4, 8]")
    return tuple(_int(path, f"{where}[{i}]", v) for i, v in enumerate(value))


def _seconds(path: Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"{path}: '{where}' must be a positive number of seconds, not {json.dumps(value)[:40]}")
    return float(value)


def _bool(path: Path, where: str, data: dict[str, Any], key: str, default: bool) -> bool:
    v = data.get(key, default)
    if not isinstance(v, bool):
        raise UserError(f"{path}: '{where}' must be true or false, not {json.dumps(v)[:40]}")
    return v


def _section(path: Path, data: dict[str, Any], key: str, known: tuple[str, ...]) -> dict[str, Any]:
    sec = data.get(key, {})
    if not isinstance(sec, dict):
        raise UserError(f"{path}: '{key}' must be a mapping of {', '.join(known)}")
    refuse_unknown(path, key, sec, known)
    return sec


def _new_tokens(path: Path, sec: dict[str, Any], prefix: str) -> tuple[int | None, int | None]:
    lo = _int(path, f"{prefix}min_new_tokens", sec["min_new_tokens"]) if "min_new_tokens" in sec else None
    hi = _int(path, f"{prefix}max_new_tokens", sec["max_new_tokens"]) if "max_new_tokens" in sec else None
    if lo is not None and hi is not None and lo > hi:
        raise UserError(f"{path}: '{prefix}min_new_tokens' ({lo}) is above '{prefix}max_new_tokens' ({hi})")
    return lo, hi


def _model_and_dataset(path: Path, data: dict[str, Any], dataset: Any, where: str) -> tuple[str | None, str | None]:
    model = data.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise UserError(f"{path}: 'model' must be a model name (a string)")
    if dataset is not None and (not isinstance(dataset, str) or not dataset):
        raise UserError(f"{path}: '{where}' must be a path to a CSV of prompts")
    return model, dataset


def _perf_fields(path: Path, sec: dict[str, Any], prefix: str, needed: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"tp_sizes": (), "batch_sizes": (), "input_tokens": (), "perf_time": None}
    for key in ("tp_sizes", "batch_sizes", "input_tokens", "perf_time"):
        if key not in sec:
            if needed:
                raise UserError(f"{path}: '{prefix}{key}' is missing (test_perf is true)")
            continue
        out[key] = _seconds(path, prefix + key, sec[key]) if key == "perf_time" else _ints(path, prefix + key, sec[key])
    return out


def _nested(path: Path, data: dict[str, Any]) -> ByteMLPerfWorkload:
    refuse_unknown(path, "top level", data, _NESTED_TOP, " (today's ByteMLPerf layout nests perf and accuracy "
             "fields in "
             "perf_config / accuracy_config)")  # fmt: skip
    test_accuracy = _bool(path, "test_accuracy", data, "test_accuracy", False)
    test_perf = _bool(path, "test_perf", data, "test_perf", False)
    if "min_tp_size" not in data:
        raise UserError(f"{path}: 'min_tp_size' is missing (ByteMLPerf's launcher requires it)")
    min_tp = _int(path, "min_tp_size", data["min_tp_size"])
    acc = _section(path, data, "accuracy_config", _ACCURACY)
    perf = _section(path, data, "perf_config", _PERF)
    if test_accuracy and "dataset" not in acc:
        raise UserError(f"{path}: 'accuracy_config.dataset' is missing (test_accuracy is true)")
    if test_perf and "output_tokens" not in perf:
        raise UserError(f"{path}: 'perf_config.output_tokens' is missing (test_perf is true)")
    model, dataset = _model_and_dataset(path, data, acc.get("dataset"), "accuracy_config.dataset")
    lo, hi = _new_tokens(path, acc, "accuracy_config.")
    out = _int(path, "perf_config.output_tokens", perf["output_tokens"]) if "output_tokens" in perf else None
    return ByteMLPerfWorkload(path=path, layout="nested", model=model, test_accuracy=test_accuracy,
                              test_perf=test_perf, min_tp_size=min_tp, output_tokens=out, min_new_tokens=lo,
                              max_new_tokens=hi, dataset=dataset,
                              **_perf_fields(path, perf, "perf_config.", test_perf))  # fmt: skip


def _flat(path: Path, data: dict[str, Any]) -> ByteMLPerfWorkload:
    refuse_unknown(path, "top level", data, _FLAT)
    test_perf = _bool(path, "test_perf", data, "test_perf", True)
    test_accuracy = _bool(path, "test_accuracy", data, "test_accuracy", False)
    min_tp = _int(path, "min_tp_size", data["min_tp_size"]) if "min_tp_size" in data else None
    model, dataset = _model_and_dataset(path, data, data.get("dataset"), "dataset")
    lo, hi = _new_tokens(path, data, "")
    return ByteMLPerfWorkload(path=path, layout="flat", model=model, test_accuracy=test_accuracy, test_perf=test_perf,
                              min_tp_size=min_tp, output_tokens=None, min_new_tokens=lo, max_new_tokens=hi,
                              dataset=dataset, **_perf_fields(path, data, "", test_perf))  # fmt: skip


def parse_bytemlperf(path: Path, data: dict[str, Any]) -> ByteMLPerfWorkload:
    """The workload of a ByteMLPerf mapping (nested when it has ``perf_config`` or ``accuracy_config``)."""
    wl = _nested(path, data) if {"perf_config", "accuracy_config"} & set(data) else _flat(path, data)
    if not wl.test_perf and not wl.test_accuracy:
        raise UserError(f"{path}: test_perf and test_accuracy are both false (or absent): nothing to run")
    if wl.test_perf and not wl.perf_tp_sizes:
        raise UserError(f"{path}: every tp size of {list(wl.tp_sizes)} is below min_tp_size {wl.min_tp_size}: "
                        "no perf point would run")  # fmt: skip
    return wl
