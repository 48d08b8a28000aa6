"""AISBench's synthetic perf data set (``SyntheticDataset``, ``configs/datasets/synthetic/*.py``) for
``lmmbench bench ais --mode perf``.

Followed (read, not copied): ``ais_bench/benchmark/datasets/synthetic.py`` (``SyntheticDataset``: the checks of
``_check_synthetic_config`` / ``check_synthetic_string_config``, ``sample_one_value`` and ``read_line``: each request
is ``"A"`` repeated the sampled input length, joined by spaces, with the sampled output length as its
``max_out_len``, which wins over the model's) and ``ais_bench/datasets/synthetic/synthetic_config.py`` (the
``synthetic_config`` dict the shipped ``synthetic_gen.py`` inherits). The ``tokenid`` type (random token ids
decoded by the model's tokenizer) is refused by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError

__all__ = ["check_synthetic_config", "synthetic_rows"]

_PARAMS = {"uniform": {"MinValue", "MaxValue"}, "gaussian": {"Mean", "Var", "MinValue", "MaxValue"},
           "zipf": {"Alpha", "MinValue", "MaxValue"}}  # fmt: skip
_LIMIT = 2**20
_FLOAT32 = 3.0e38


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_param(file: Path, where: str, name: str, value: Any) -> None:
    if name in ("MinValue", "MaxValue"):
        ok = _is_int(value) and 1 <= value <= _LIMIT
        need = f"a whole number in [1, {_LIMIT}]"
    elif name == "Mean":
        ok, need = _is_num(value) and -_FLOAT32 <= value <= _FLOAT32, "a number"
    elif name == "Var":
        ok, need = _is_num(value) and 0 <= value <= _FLOAT32, "a number >= 0"
    else:  # Alpha
        ok, need = _is_num(value) and 1.0 < value <= 10.0, "a number in (1.0, 10.0]"
    if not ok:
        raise UserError(f"{file}: synthetic_config {where} {name}={value!r}: must be {need} (AISBench's check)")


def _check_length(file: Path, key: str, conf: Any) -> None:
    if not isinstance(conf, dict) or set(conf) != {"Method", "Params"}:
        raise UserError(f"{file}: synthetic_config StringConfig[{key!r}] must have exactly Method and Params")
    method, params = conf["Method"], conf["Params"]
    if method not in _PARAMS:
        raise UserError(f"{file}: synthetic_config {key} Method {method!r}: one of uniform, gaussian, zipf")
    if not isinstance(params, dict) or set(params) != _PARAMS[method]:
        raise UserError(f"{file}: synthetic_config {key} Params of {method} must be exactly "
                        f"{', '.join(sorted(_PARAMS[method]))}")
    for name, value in params.items():
        _check_param(file, key, name, value)
    if params["MinValue"] > params["MaxValue"]:
        raise UserError(f"{file}: synthetic_config {key}: MinValue {params['MinValue']} > MaxValue "
                        f"{params['MaxValue']}")


def check_synthetic_config(cfg: Any, file: Path) -> dict[str, Any]:
    """``synthetic_config`` checked as AISBench checks it; the string type only (tokenid refused by name)."""
    if not isinstance(cfg, dict):
        raise UserError(f"{file}: the synthetic data set's config must be a dict")
    for key in ("Type", "RequestCount"):
        if key not in cfg:
            raise UserError(f"{file}: synthetic_config has no {key}")
    kind = cfg["Type"]
    if not isinstance(kind, str) or kind.lower() not in ("string", "tokenid"):
        raise UserError(f"{file}: synthetic_config Type {kind!r}: string or tokenid")
    if kind.lower() == "tokenid":
        raise UserError(f"{file}: synthetic_config Type 'tokenid' (random token ids decoded with the model's "
                        "tokenizer) is not supported by lmmbench's AISBench drop-in this round; use Type 'string'")
    count = cfg["RequestCount"]
    if not _is_int(count) or not 1 <= count <= _LIMIT:
        raise UserError(f"{file}: synthetic_config RequestCount={count!r}: a whole number in [1, {_LIMIT}]")
    extra = sorted(set(cfg) - {"Type", "RequestCount", "TrustRemoteCode", "StringConfig", "TokenIdConfig"})
    if extra:
        raise UserError(f"{file}: synthetic_config key {extra[0]} is not one of AISBench's")
    string = cfg.get("StringConfig")
    if not isinstance(string, dict) or not {"Input", "Output"} <= set(string):
        raise UserError(f"{file}: synthetic_config StringConfig must have Input and Output")
    for key in ("Input", "Output"):
        _check_length(file, key, string[key])
    return cfg


def _sample(rng: Any, method: str, params: dict[str, Any]) -> int:
    """One length, as ``SyntheticDataset.sample_one_value`` draws it (truncated to a whole number)."""
    import numpy as np

    lo, hi = params["MinValue"], params["MaxValue"]
    if method == "uniform":
        return int(rng.uniform(lo, hi))
    if method == "gaussian":
        return int(np.clip(rng.normal(params["Mean"], np.sqrt(params["Var"])), lo, hi))
    return int(np.clip(rng.zipf(params["Alpha"]), lo, hi))


def synthetic_rows(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows ``SyntheticDataset.load`` builds for a string config: ``question`` ("A A ... A", the sampled input
    length), ``answer`` "aaa" and ``max_out_len`` (the sampled output length). Unseeded, as AISBench's."""
    import numpy as np

    rng = np.random.default_rng()
    conf = cfg["StringConfig"]
    rows = []
    for _ in range(int(cfg["RequestCount"])):
        n_in = _sample(rng, conf["Input"]["Method"], conf["Input"]["Params"])
        n_out = _sample(rng, conf["Output"]["Method"], conf["Output"]["Params"])
        rows.append({"question": " ".join(["A"] * n_in), "answer": "aaa", "max_out_len": n_out})
    return rows
