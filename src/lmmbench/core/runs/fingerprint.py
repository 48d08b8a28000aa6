"""The workload fingerprint of a run: the few facts that decide what a run measured, so that a run is compared
automatically only with an earlier run that measured the same thing.

``workload_fingerprint(run_log)`` reads them from the run log (and hashes the data files it names):

- perf: the endpoint's model (what the server answered as), the load points, the data set (name and the SHA-256
  of its file; the tasks of a run of evaluation tasks), the input / output lengths and their spreads, the seed;
- eval: the model, the tasks and their versions, few-shot, the generation settings (``--gen_kwargs``,
  ``--system_instruction``, chat template, few-shot as turns, ``--prompt`` and the registered prompts' hashes,
  the seed, ``--limit``);
- spec: the spec, the model, the manifest (name and SHA-256; none: the synthetic set), device and dtype; the
  episodic spec also the environment, the policy and the slots that ran (its effective N).

``write_run_log`` stores it in the run log's ``run`` section as ``run.workload_fingerprint`` (``fields`` and
their ``sha256``). ``fingerprint_differences`` names the fields two fingerprints differ in.
Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lmmbench.core.runs.log_schema import RunLog

__all__ = ["FINGERPRINT_KEY", "file_sha256", "fingerprint_differences", "stored_fingerprint", "workload_fingerprint"]

#: where the fingerprint is kept: ``run_log.run[FINGERPRINT_KEY]``
FINGERPRINT_KEY = "workload_fingerprint"
_PERF_LENGTHS = ("input_tokens", "input_tokens_stddev", "output_tokens", "output_tokens_stddev")
_EVAL_SETTINGS = ("num_fewshot", "gen_kwargs", "system_instruction", "apply_chat_template", "fewshot_as_multiturn",
                  "prompt", "seed", "limit")  # fmt: skip
_hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: a perf run rewrites its log often


def file_sha256(path: str | Path | None) -> str | None:
    """SHA-256 of a file (None: no path, or not a readable file)."""
    if not path:
        return None
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _hashes:
            digest = hashlib.sha256()
            with p.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
            _hashes[key] = digest.hexdigest()
        return _hashes[key]
    except (OSError, ValueError):
        return None


def _perf_fields(run_log: RunLog) -> dict[str, Any]:
    cfg = run_log.config
    tasks = cfg.get("tasks") or []
    points = [{k: v for k, v in p.items() if k != "labels"} for p in run_log.run.get("points") or []
              if isinstance(p, dict)]  # fmt: skip
    base_load = {k: cfg.get(k) for k in ("rate", "concurrency", "rates", "concurrencies")}
    return {"model": run_log.model, "load_points": points or [base_load],
            "dataset": f"tasks: {', '.join(map(str, tasks))}" if tasks else cfg.get("dataset"),
            "dataset_sha256": file_sha256(cfg.get("dataset_path")),
            **{k: cfg.get(k) for k in _PERF_LENGTHS}, "seed": cfg.get("seed")}  # fmt: skip


def _eval_fields(run_log: RunLog) -> dict[str, Any]:
    cfg = run_log.config
    prompts = sorted(f"{p.get('ref')} {p.get('sha256')}" for p in cfg.get("prompts") or [] if isinstance(p, dict))
    return {"model": run_log.model, "tasks": list(cfg.get("tasks") or []),
            "task_versions": run_log.run.get("task_versions"), **{k: cfg.get(k) for k in _EVAL_SETTINGS},
            "registered_prompts": prompts}  # fmt: skip


def _spec_fields(run_log: RunLog) -> dict[str, Any]:
    cfg = run_log.config
    manifest = cfg.get("manifest")
    out: dict[str, Any] = {"spec": cfg.get("spec") or run_log.name, "model": cfg.get("model") or run_log.model,
                           "manifest": Path(str(manifest)).name if manifest else None,
                           "manifest_sha256": file_sha256(manifest),
                           "device": run_log.measurement.device or cfg.get("device"),
                           "dtype": run_log.measurement.dtype or cfg.get("dtype")}  # fmt: skip
    episodic = run_log.run.get("episodic_eval")
    if isinstance(episodic, dict):
        out.update(env=episodic.get("env"), policy=episodic.get("policy"), slots_ran=episodic.get("slots_ran"))
    return out


def workload_fingerprint(run_log: RunLog) -> dict[str, Any] | None:
    """``{"kind", "fields", "sha256"}`` of a perf, eval or spec run (None for other kinds)."""
    builders = {"perf": _perf_fields, "eval": _eval_fields, "spec": _spec_fields}
    build = builders.get(run_log.kind)
    if build is None:
        return None
    fields = json.loads(json.dumps(build(run_log), default=str))  # what run.json holds, so a read-back compares equal
    digest = hashlib.sha256(json.dumps([run_log.kind, fields], sort_keys=True).encode()).hexdigest()
    return {"kind": run_log.kind, "fields": fields, "sha256": digest}


def stored_fingerprint(run_log: RunLog) -> dict[str, Any] | None:
    """The fingerprint a run log recorded (None: written before fingerprints were kept)."""
    found = run_log.run.get(FINGERPRINT_KEY)
    return found if isinstance(found, dict) and isinstance(found.get("fields"), dict) else None


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def fingerprint_differences(earlier: dict[str, Any] | None, this: dict[str, Any] | None) -> list[str]:
    """``field: earlier -> this`` for every field the two fingerprints differ in ([]: the same workload)."""
    if this is None:
        return []
    if earlier is None:
        return ["workload fingerprint (its run log cannot be read)"]
    if earlier.get("kind") != this.get("kind"):
        return [f"kind: {earlier.get('kind')} -> {this.get('kind')}"]
    a, b = earlier["fields"], this["fields"]
    return [f"{k}: {_short(a.get(k))} -> {_short(b.get(k))}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
