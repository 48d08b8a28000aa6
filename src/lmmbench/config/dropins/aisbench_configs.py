"""AISBench config names resolved and checked: the model, data set and summarizer configs that
``lmmbench bench ais`` supports, as typed views over the dicts :mod:`aisbench_reader` reads.

Names resolve as AISBench's ``ConfigManager`` resolves them (``cli/config_manager.py``, ``utils/file/file.py``
``match_cfg_file``): every ``NAME.py`` below ``--config-dir/models`` (data sets: ``datasets``,
``dataset_collections``), then below the installation's ``ais_bench/benchmark/configs`` (``--aisbench-root``);
the first of several matches wins. A name that matches nothing and is a file path is read as that file.
Every field of a supported config is honoured or refused by name.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from lmmbench.config.dropins.aisbench_reader import ImportedName, read_config_file
from lmmbench.core.errors import UserError

__all__ = ["AisDataset", "AisModel", "find_config", "load_datasets", "load_models", "prompt_version", "type_name"]

#: the classes of AISBench 3.1 a supported config may name, and the module each is defined in (AISBench writes a
#: type as ``module.name`` of its definition in the dumped config, which its prompt version hashes)
KNOWN_TYPES = {
    "VLLMCustomAPI": "ais_bench.benchmark.models.api_models.vllm_custom_api",
    "VLLMCustomAPIStream": "ais_bench.benchmark.models.api_models.vllm_custom_api",
    "VLLMCustomAPIChat": "ais_bench.benchmark.models.api_models.vllm_custom_api_chat",
    "VLLMCustomAPIChatStream": "ais_bench.benchmark.models.api_models.vllm_custom_api_chat",
    "PromptTemplate": "ais_bench.benchmark.openicl.icl_prompt_template.icl_prompt_template",
    "ZeroRetriever": "ais_bench.benchmark.openicl.icl_retriever.icl_zero_retriever",
    "GenInferencer": "ais_bench.benchmark.openicl.icl_inferencer.icl_gen_inferencer",
    "GSM8KDataset": "ais_bench.benchmark.datasets.gsm8k",
    "Gsm8kEvaluator": "ais_bench.benchmark.datasets.gsm8k",
    "gsm8k_postprocess": "ais_bench.benchmark.datasets.gsm8k",
    "gsm8k_dataset_postprocess": "ais_bench.benchmark.datasets.gsm8k",
    "extract_non_reasoning_content": "ais_bench.benchmark.utils.postprocess.model_postprocessors",
    "SyntheticDataset": "ais_bench.benchmark.datasets.synthetic",
    "MATHEvaluator": "ais_bench.benchmark.datasets.math",
    "math_postprocess_v2": "ais_bench.benchmark.datasets.math",
}


def type_name(value: Any) -> str:
    """The class / function name a ``type=`` value names (an import, or a dotted string of a dumped config)."""
    if isinstance(value, ImportedName):
        return value.name
    if isinstance(value, str):
        return value.rsplit(".", 1)[-1]
    return repr(value)


def _dotted(value: Any) -> Any:
    """``value`` with every ``type`` written as AISBench writes it after loading (``module.name``)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "type":
                name = type_name(v)
                out[k] = f"{KNOWN_TYPES[name]}.{name}" if name in KNOWN_TYPES else (v.dotted if isinstance(
                    v, ImportedName) else v)  # fmt: skip
            else:
                out[k] = _dotted(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_dotted(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """``value`` as JSON-able data (types as AISBench writes them)."""
    return _dotted(value)


# ---------------------------------------------------------------------------------------------------- resolution
def _search_dirs(kind: str, config_dir: str, root: Path | None) -> list[Path]:
    subs = ["datasets", "dataset_collections"] if kind == "datasets" else [kind]
    dirs = [Path(config_dir) / s for s in subs]
    if root is not None:
        dirs += [root / "ais_bench" / "benchmark" / "configs" / s for s in subs]
    return dirs


def find_config(kind: str, name: str, config_dir: str, root: Path | None) -> Path:
    """The config file ``name`` (without ``.py``) of ``kind`` (models, datasets, summarizers)."""
    pattern = (name if name.endswith(".py") else name + ".py").lower()
    dirs = _search_dirs(kind, config_dir, root)
    for folder in dirs:
        found = sorted(((f[:-3], Path(r) / f) for r, _, files in os.walk(folder) for f in files
                        if fnmatch.fnmatch(f.lower(), pattern)), key=lambda x: x[0])  # fmt: skip
        if found:
            return found[0][1]
    path = Path(name)
    if path.is_file():
        return path
    where = ", ".join(str(d) for d in dirs)
    hint = "" if root is not None else "; give --aisbench-root to search an AISBench installation's configs"
    raise UserError(f"--{kind} {name}: no config file {pattern} under {where}{hint}")


# ---------------------------------------------------------------------------------------------------- models
_MODEL_TYPES = {"VLLMCustomAPI": (False, None), "VLLMCustomAPIStream": (False, True),
                "VLLMCustomAPIChat": (True, None), "VLLMCustomAPIChatStream": (True, True)}  # fmt: skip

#: model fields read only as their default (AISBench's meaning kept); any other value is refused
_DEFAULT_ONLY = {"use_timestamp": False, "verbose": False}


class AisModel(BaseModel):
    """A VLLMCustomAPI / VLLMCustomAPIChat model config (``models/vllm_api/*.py``) as lmmbench runs it."""

    abbr: str
    type: str
    chat: bool
    stream: bool = False
    path: str = ""
    model: str = ""
    request_rate: float = 0.0
    retry: int = 2
    api_key: str = ""
    host_ip: str = "localhost"
    host_port: int = 8080
    url: str = ""
    max_out_len: int = 4096
    batch_size: int = Field(1, ge=1)
    trust_remote_code: bool = False
    enable_ssl: bool = False
    generation_kwargs: dict[str, Any] = Field(default_factory=dict)
    think_tokens: tuple[str, str] | None = None  # pred_postprocessor extract_non_reasoning_content
    summarizer_abbr: str | None = None
    raw: dict[str, Any] = Field(default_factory=dict)

    def base_url(self) -> str:
        """The service's base URL, as AISBench's ``BaseAPIModel._get_base_url`` builds it."""
        protocol = "https" if self.enable_ssl else "http"
        clean = self.url.strip()
        if clean:
            url = clean if clean.startswith(("http://", "https://")) else f"{protocol}://{clean}"
            parsed = urllib.parse.urlparse(url)
            if not parsed.path or parsed.path.endswith("/"):
                return url
            return urllib.parse.urlunparse(parsed._replace(path=parsed.path + "/"))
        host = f"[{self.host_ip}]" if ":" in self.host_ip else self.host_ip
        return f"{protocol}://{host}:{self.host_port}/"

    def endpoint(self) -> str:
        """The URL the requests go to (``v1/chat/completions`` or ``v1/completions`` joined to the base)."""
        return urllib.parse.urljoin(self.base_url(), "v1/chat/completions" if self.chat else "v1/completions")

    def headers(self) -> dict[str, str]:
        """The request headers AISBench sends."""
        out = {"Content-Type": "application/json"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out


def _model(cfg: Any, file: Path) -> AisModel:
    if not isinstance(cfg, dict):
        raise UserError(f"{file}: every item of `models` must be a dict(...)")
    name = type_name(cfg.get("type"))
    if name not in _MODEL_TYPES:
        raise UserError(f"{file}: model type {name} is not supported by lmmbench's AISBench drop-in (supported: "
                        f"{', '.join(_MODEL_TYPES)})")
    if cfg.get("attr", "service") != "service":
        raise UserError(f"{file}: attr={cfg.get('attr')!r}: only service models (attr='service') are supported")
    chat, forced_stream = _MODEL_TYPES[name]
    fields = dict(cfg)
    fields.pop("attr", None)
    fields.pop("type")
    for key, default in _DEFAULT_ONLY.items():
        if key in fields and fields.pop(key) != default:
            raise UserError(f"{file}: {key}={cfg[key]!r} is not honoured by lmmbench's AISBench drop-in "
                            f"(only {default!r}: no data set of this round carries timestamps / verbose logs)")
    think = _think_tokens(fields.pop("pred_postprocessor", None), file)
    known = set(AisModel.model_fields) - {"type", "chat", "think_tokens", "raw"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UserError(f"{file}: model field {unknown[0]} is not honoured by lmmbench's AISBench drop-in "
                        f"(honoured: {', '.join(sorted(known | {'attr', 'type', 'pred_postprocessor'}))})")
    gen = fields.get("generation_kwargs") or {}
    if not isinstance(gen, dict):
        raise UserError(f"{file}: generation_kwargs must be a dict(...)")
    if int(gen.get("num_return_sequences", 1)) != 1:
        raise UserError(f"{file}: generation_kwargs num_return_sequences > 1 (AISBench's repeated sampling and "
                        "pass@k) is not supported by lmmbench's AISBench drop-in this round")
    if "abbr" not in fields:
        raise UserError(f"{file}: the model has no abbr")
    from pydantic import ValidationError

    from lmmbench.core.errors import user_error_from_validation

    try:
        model = AisModel.model_validate({**fields, "generation_kwargs": gen, "type": name, "chat": chat,
                                         "think_tokens": think, "raw": plain(cfg)})  # fmt: skip
    except ValidationError as exc:
        raise user_error_from_validation(exc, str(file)) from None
    if forced_stream:
        model.stream = True
    return model


def _think_tokens(proc: Any, file: Path) -> tuple[str, str] | None:
    if proc is None:
        return None
    if not isinstance(proc, dict) or type_name(proc.get("type")) != "extract_non_reasoning_content":
        raise UserError(f"{file}: pred_postprocessor {type_name((proc or {}).get('type'))} is not supported "
                        "(supported: extract_non_reasoning_content)")
    extra = sorted(set(proc) - {"type", "think_start_token", "think_end_token"})
    if extra:
        raise UserError(f"{file}: pred_postprocessor field {extra[0]} is not honoured")
    return str(proc.get("think_start_token", "<think>")), str(proc.get("think_end_token", "</think>"))


def load_models(names: list[str], config_dir: str, root: Path | None) -> list[AisModel]:
    """The models of every ``--models`` name (each file's ``models`` list)."""
    out: list[AisModel] = []
    for name in names:
        file = find_config("models", name, config_dir, root)
        values = read_config_file(file, root)
        if not isinstance(values.get("models"), list):
            raise UserError(f"{file}: no `models = [...]` in the config file")
        out += [_model(m, file) for m in values["models"]]
    return out


# ---------------------------------------------------------------------------------------------------- data sets
class AisDataset(BaseModel):
    """A gsm8k data set config (``datasets/gsm8k/*.py``) as lmmbench runs it."""

    abbr: str
    kind: str
    path: str
    input_columns: list[str]
    output_column: str
    test_range: str | None = None
    template: str | list[dict[str, str]]
    stopping_criteria: list[str] = Field(default_factory=list)
    synthetic: dict[str, Any] | None = None  # SyntheticDataset's config (kind "synthetic")
    file: str
    raw: dict[str, Any] = Field(default_factory=dict)

    @property
    def chat_template(self) -> bool:
        """The prompt is a list of role rounds (``template=dict(round=[...])``)."""
        return isinstance(self.template, list)


def _need(cfg: dict[str, Any], key: str, file: Path, where: str) -> Any:
    if key not in cfg:
        raise UserError(f"{file}: {where} has no {key}")
    return cfg[key]


def _only(cfg: dict[str, Any], allowed: set[str], file: Path, where: str) -> None:
    extra = sorted(set(cfg) - allowed)
    if extra:
        raise UserError(f"{file}: {where} field {extra[0]} is not honoured by lmmbench's AISBench drop-in "
                        f"(honoured: {', '.join(sorted(allowed))})")


def _typed(cfg: Any, expected: str, file: Path, where: str) -> dict[str, Any]:
    if not isinstance(cfg, dict) or type_name(cfg.get("type")) != expected:
        got = type_name(cfg.get("type")) if isinstance(cfg, dict) else repr(cfg)
        raise UserError(f"{file}: {where} type {got} is not supported by lmmbench's AISBench drop-in this round "
                        f"(supported: {expected})")
    return cfg


def _template(tpl: Any, file: Path) -> str | list[dict[str, str]]:
    if isinstance(tpl, str):
        return tpl
    if not isinstance(tpl, dict) or set(tpl) != {"round"} or not isinstance(tpl["round"], list):
        raise UserError(f"{file}: prompt_template template must be a string or dict(round=[...]) (begin / end "
                        "sections are not supported this round)")
    rounds = []
    for item in tpl["round"]:
        if not isinstance(item, dict) or set(item) != {"role", "prompt"} or item["role"] not in ("HUMAN", "BOT"):
            raise UserError(f"{file}: a round item must be dict(role='HUMAN' or 'BOT', prompt='...'): {item!r}")
        rounds.append({"role": str(item["role"]), "prompt": str(item["prompt"])})
    return rounds


def _reader_and_prompt(cfg: dict[str, Any], file: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A data set's ``reader_cfg``, ``infer_cfg`` and its ``PromptTemplate``, checked (only the keys lmmbench acts
    on; the zero-shot retriever, the only one supported)."""
    reader = _need(cfg, "reader_cfg", file, "the data set")
    _only(reader, {"input_columns", "output_column", "test_range"}, file, "reader_cfg")
    infer = _need(cfg, "infer_cfg", file, "the data set")
    _only(infer, {"prompt_template", "retriever", "inferencer"}, file, "infer_cfg")
    pt = _typed(_need(infer, "prompt_template", file, "infer_cfg"), "PromptTemplate", file, "prompt_template")
    _only(pt, {"type", "template"}, file, "prompt_template")
    _only(_typed(infer.get("retriever"), "ZeroRetriever", file, "retriever"), {"type"}, file, "retriever")
    return reader, infer, pt


def _gsm8k(cfg: dict[str, Any], file: Path) -> AisDataset:
    _only(cfg, {"abbr", "type", "path", "reader_cfg", "infer_cfg", "eval_cfg"}, file, "the data set")
    reader, infer, pt = _reader_and_prompt(cfg, file)
    inferencer = _typed(infer.get("inferencer"), "GenInferencer", file, "inferencer")
    _only(inferencer, {"type", "stopping_criteria"}, file, "inferencer")  # AISBench sends no stop for API models
    ev = _need(cfg, "eval_cfg", file, "the data set")
    _only(ev, {"evaluator", "pred_role", "pred_postprocessor", "dataset_postprocessor"}, file, "eval_cfg")
    _only(_typed(ev.get("evaluator"), "Gsm8kEvaluator", file, "evaluator"), {"type"}, file, "evaluator")
    for key, fn in (("pred_postprocessor", "gsm8k_postprocess"),
                    ("dataset_postprocessor", "gsm8k_dataset_postprocess")):  # fmt: skip
        _only(_typed(ev.get(key), fn, file, key), {"type"}, file, key)
    columns = _need(reader, "input_columns", file, "reader_cfg")
    path = str(_need(cfg, "path", file, "data set"))
    return AisDataset(abbr=str(cfg.get("abbr") or "gsm8k"), kind="gsm8k", path=path,
                      input_columns=[str(c) for c in (columns if isinstance(columns, list) else [columns])],
                      output_column=str(_need(reader, "output_column", file, "reader_cfg")),
                      test_range=reader.get("test_range"), template=_template(pt.get("template"), file),
                      stopping_criteria=list(inferencer.get("stopping_criteria") or []), file=str(file),
                      raw=plain(cfg))  # fmt: skip


def load_datasets(names: list[str], config_dir: str, root: Path | None) -> list[AisDataset]:
    """The data sets of every ``--datasets`` name (``NAME`` or ``NAME/SUFFIX``: the file's variables ending with
    ``_datasets`` or with SUFFIX), in the order AISBench reads them."""
    out: list[AisDataset] = []
    for arg in names:
        name, suffix = arg.split("/", 1) if "/" in arg else (arg, "_datasets")
        file = find_config("datasets", name, config_dir, root)
        values = read_config_file(file, root)
        keys = [k for k in values if k.endswith(suffix)]
        if not keys:
            raise UserError(f"{file}: no variable ending with {suffix} (AISBench reads `<name>{suffix} = [...]`)")
        for key in keys:
            for cfg in values[key] if isinstance(values[key], list) else [values[key]]:
                out.append(dataset_from_dict(cfg, file))
    return out


def dataset_from_dict(cfg: Any, file: Path) -> AisDataset:
    """One data set dict checked: gsm8k this round; any other type refused by name."""
    if not isinstance(cfg, dict):
        raise UserError(f"{file}: every data set must be a dict(...)")
    name = type_name(cfg.get("type"))
    if name == "GSM8KDataset":
        return _gsm8k(cfg, file)
    if name == "SyntheticDataset":
        return _synthetic(cfg, file)
    raise UserError(f"{file}: data set type {name} is not supported by lmmbench's AISBench drop-in this round "
                    "(supported: GSM8KDataset, and SyntheticDataset in --mode perf)")


def _synthetic(cfg: dict[str, Any], file: Path) -> AisDataset:
    """``configs/datasets/synthetic/synthetic_gen*.py``: the string type, a ``{question}`` template."""
    from lmmbench.config.dropins.aisbench_synthetic import check_synthetic_config

    _only(cfg, {"abbr", "type", "config", "reader_cfg", "infer_cfg", "eval_cfg"}, file, "the data set")
    reader, infer, pt = _reader_and_prompt(cfg, file)
    _only(_typed(infer.get("inferencer"), "GenInferencer", file, "inferencer"), {"type"}, file, "inferencer")
    ev = cfg.get("eval_cfg") or {}  # MATHEvaluator / math_postprocess_v2: not used in --mode perf
    _only(ev, {"evaluator", "pred_postprocessor", "pred_role"}, file, "eval_cfg")
    columns = _need(reader, "input_columns", file, "reader_cfg")
    return AisDataset(abbr=str(cfg.get("abbr") or "synthetic"), kind="synthetic", path="",
                      input_columns=[str(c) for c in (columns if isinstance(columns, list) else [columns])],
                      output_column=str(_need(reader, "output_column", file, "reader_cfg")),
                      test_range=reader.get("test_range"), template=_template(pt.get("template"), file),
                      synthetic=check_synthetic_config(_need(cfg, "config", file, "the data set"), file),
                      file=str(file), raw=plain(cfg))  # fmt: skip


def prompt_version(ds: AisDataset) -> str:
    """The ``version`` column of AISBench's summary: the first 6 hex digits of the SHA-256 of the data set's
    ``infer_cfg`` as AISBench dumps it (``utils/prompt/prompt.py`` ``get_prompt_hash``; the retriever carries the
    prompt template, types are ``module.name``)."""
    infer = json.loads(json.dumps(ds.raw["infer_cfg"]))
    infer["retriever"]["prompt_template"] = infer["prompt_template"]
    text = json.dumps(infer, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:6]
