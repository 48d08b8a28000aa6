"""Spec ``model-bench``: ByteMLPerf's ``bench_model.py``, the forward time of an in-process model.

Prefill (``context``): one forward of ``batch x seq_len`` random prompt tokens, KV cache written, the last
position's logits only. Decode: one step of ``batch`` tokens against a KV cache already holding ``seq_len``
tokens (the cache is cut back to ``seq_len`` after each step, outside the timing, so every step sees the same
length). Each (phase, batch, seq_len) cell runs as ByteMLPerf runs it: ``--warmup-iters`` (2) unrecorded
forwards, then forwards until their measured time adds up to ``--budget-s`` (5 s) or ``--max-iters`` (100)
were measured; the cell is their mean (ms). Timed with CUDA events on CUDA, ``perf_counter_ns`` elsewhere.

Files beside the spec's standard ones, as ByteMLPerf lays them out: ``context_perf.csv`` and
``decode_perf.csv`` (a matrix: the first header cell names batch size across and sequence length down, one
column per batch size, one row per sequence length, each cell the mean ms, empty when unmeasured),
``output.txt`` (one line per cell) and ``config.json`` (the run's configuration). They are rewritten after
every cell, and from the whole results file at the end (so a resumed run's matrices hold every cell).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from lmmbench.config.limits import check_limit
from lmmbench.core.errors import UserError
from lmmbench.models.families import ModelFamily
from lmmbench.specs.base import Case, RunOptions, Spec, SpecContext, register_spec
from lmmbench.specs.experiment_support import load_spec_model, new_figure, ok_rows, save_figure

__all__ = ["MATRIX_CORNER", "ModelBenchOptions", "ModelBenchSpec", "check_before_loading", "measure_cell",
           "write_matrix"]

#: The first header cell of ByteMLPerf's matrices: batch size across, sequence length down.
MATRIX_CORNER = "batch_size\n----------\nseq_len"
PHASES = ("context", "decode")

_NOT_APPLICABLE = frozenset({"manifest", "limit", "video_fps", "max_frames", "hooks", "profile", "profile_sample",
                             "profile_repeat", "target_ci_pct", "max_repeats"})  # fmt: skip


class ModelBenchOptions(RunOptions):
    """Options of ``lmmbench run model-bench`` (ByteMLPerf's ``perf_config`` and its loop)."""

    model: str = Field("tiny-llm", description="A causal LM: tiny-llm, a hub id (ORG/NAME) or a local directory.")
    repeats: int = Field(1, ge=1, description="ByteMLPerf measurements per cell (each: warm-up iterations, then "
                         "iterations up to the budget); the matrix cell is the mean over all of them.")
    warmup: int = Field(0, ge=0, description="Whole unrecorded measurements per cell before the repeats (each "
                        "measurement has its own --warmup-iters).")
    phases: list[Literal["context", "decode"]] = Field(["context", "decode"], description="context (prefill) "
                                                      "and / or decode (ByteMLPerf's perf_context / perf_decode).")
    seq_lens: list[int] = Field([1024, 2048, 4096, 8192], description="Sequence lengths (prompt tokens; the KV "
                                "cache length of a decode step).")
    batch_sizes: list[int] = Field([1, 4, 8, 16, 24, 32], description="Batch sizes of the decode matrix.")
    context_batch_sizes: list[int] = Field([1], description="Batch sizes of the context matrix (ByteMLPerf: 1).")
    warmup_iters: int = Field(2, ge=0, description="Unrecorded forwards at the start of each measurement.")
    budget_s: float = Field(5.0, gt=0, description="Measure forwards until their times add up to this.")
    max_iters: int = Field(100, ge=1, description="... or until this many forwards were measured.")

    @model_validator(mode="after")
    def _check_sizes(self) -> ModelBenchOptions:
        for name in ("seq_lens", "batch_sizes", "context_batch_sizes"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                raise ValueError(f"{name} must be a non-empty list of positive integers")
            check_limit("sweep_points", len(values), f"--{name.replace('_', '-')}")
        check_limit("input_tokens", max(self.seq_lens), "--seq-lens")
        check_limit("batch_size", max(self.batch_sizes), "--batch-sizes")
        check_limit("batch_size", max(self.context_batch_sizes), "--context-batch-sizes")
        check_limit("duration_s", self.budget_s, "--budget-s")
        if not self.phases:
            raise ValueError("phases: give context, decode or both")
        return self


def _model_config(model: str) -> tuple[Path, dict[str, Any], ModelFamily]:
    """(folder, config.json, family) of ``--model`` without loading it: a built-in model is built as any run builds
    it, a hub id has its config.json alone fetched, a shape's config is the one it ships."""
    from lmmbench.config.input_files import load_json, read_text
    from lmmbench.core.hub import looks_like_hub_id, resolve_hub_snapshot
    from lmmbench.models.families import family_from_config, get_family
    from lmmbench.models.loading import resolve_model
    from lmmbench.models.tiny import TINY_MODEL_NAMES

    if model.startswith("shape:"):
        from lmmbench.models.shapes import load_shape_spec, shape_model_dir

        spec = load_shape_spec(model)
        return shape_model_dir(spec.name), spec.config, get_family(spec.family)
    if model not in TINY_MODEL_NAMES and not Path(model).expanduser().exists() and looks_like_hub_id(model):
        path = Path(resolve_hub_snapshot(model, allow_patterns=["config.json"]).path)
    else:
        path = resolve_model(model).path
    cfg = path / "config.json"
    config = load_json(read_text(cfg, "model config"), cfg) if cfg.is_file() else None
    if not isinstance(config, dict):
        raise UserError(f"--model {model}: {path / 'config.json'} is missing or not a JSON object; give a "
                        "transformers model directory")  # fmt: skip
    return path, config, family_from_config(path)


def _int(config: dict[str, Any], *names: str) -> int | None:
    """The first of ``names`` in ``config`` that is a positive integer (a bool is not one)."""
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _kv_bytes_per_token(config: dict[str, Any], dtype_bytes: int) -> int:
    """Bytes the KV cache holds per token: 2 (K and V) x layers x KV heads x head dim x dtype; 0 where the
    config does not say (the memory check is then the weights' alone)."""
    layers, heads = _int(config, "num_hidden_layers", "n_layer"), _int(config, "num_attention_heads", "n_head")
    kv_heads = _int(config, "num_key_value_heads") or heads
    hidden = _int(config, "hidden_size", "n_embd")
    head_dim = _int(config, "head_dim") or (hidden // heads if hidden and heads else None)
    if not (layers and kv_heads and head_dim):
        return 0
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def _device_and_dtype_bytes(opts: ModelBenchOptions) -> tuple[Any, int]:
    """The device the run will use and the bytes of one value in its dtype (``auto`` as loading resolves it)."""
    from lmmbench.models.loading import pick_device

    device = pick_device(opts.device)
    dtype = opts.dtype if opts.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    return device, {"float16": 2, "bfloat16": 2}.get(str(dtype), 4)


def check_before_loading(opts: ModelBenchOptions) -> None:
    """Every check of a model-bench run that needs no model, from ``config.json`` alone (UserError, one line):
    a text model; every sequence length (and the decode step's one more) within its positions; the largest
    cell's KV cache, input ids and weights (a lower bound of what the cell needs) within the device's free
    memory."""
    from lmmbench.models.shapes import available_bytes

    path, config, family = _model_config(opts.model)
    if family.multimodal:
        raise UserError(f"--model {opts.model}: model-bench times a text model's forward; this one is "
                        f"{family.name} (use tiny-llm or a causal LM)")  # fmt: skip
    limit = _int(config, "max_position_embeddings", "n_positions", "n_ctx")
    longest = max(opts.seq_lens) + (1 if "decode" in opts.phases else 0)
    if limit is not None and longest > limit:
        raise UserError(f"--seq-lens {max(opts.seq_lens)}: the model holds at most {limit} positions "
                        f"({longest} needed{', the decode step adds one' if 'decode' in opts.phases else ''})")
    device, dtype_bytes = _device_and_dtype_bytes(opts)
    weights = sum(f.stat().st_size for f in path.glob("*") if f.suffix in (".safetensors", ".bin")) // 4 * dtype_bytes
    per_token = _kv_bytes_per_token(config, dtype_bytes) + 8  # + the int64 input id
    have = available_bytes(device)
    for phase, flag in (("context", "--context-batch-sizes"), ("decode", "--batch-sizes")):
        if phase not in opts.phases:
            continue
        batch = max(opts.context_batch_sizes if phase == "context" else opts.batch_sizes)
        need = weights + batch * (max(opts.seq_lens) + int(phase == "decode")) * per_token
        if need > have:
            raise UserError(f"{flag} {batch} with --seq-lens {max(opts.seq_lens)}: the {phase} cell needs at least "
                            f"{need / 1024**3:.1f} GiB (KV cache, input ids and weights) but {device} has "
                            f"{have / 1024**3:.1f} GiB free; give smaller sizes or a bigger device")


def _timer(device: Any) -> tuple[str, Callable[[Callable[[], Any]], float]]:
    """(timer name, time one call in ms): CUDA events on a CUDA device, ``perf_counter_ns`` elsewhere."""
    import time

    import torch

    if device.type == "cuda":
        def cuda_ms(step: Callable[[], Any]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))

        return "cuda_event", cuda_ms

    def cpu_ms(step: Callable[[], Any]) -> float:
        t0 = time.perf_counter_ns()
        step()
        return (time.perf_counter_ns() - t0) / 1e6

    return "perf_counter_ns", cpu_ms


Step = Callable[[], Any]


def measure_cell(step: Step, after: Step | None, time_ms: Callable[[Step], float], warmup_iters: int,
                 budget_ms: float, max_iters: int) -> list[float]:  # fmt: skip
    """ByteMLPerf's loop: ``warmup_iters`` unrecorded calls, then calls until the measured ms reach
    ``budget_ms`` or ``max_iters`` calls were measured; ``after`` runs untimed after every call."""
    times: list[float] = []
    warm = warmup_iters
    while sum(times) < budget_ms and len(times) < max_iters:
        ms = time_ms(step)
        if after is not None:
            after()
        if warm > 0:
            warm -= 1
            continue
        times.append(ms)
    return times


def _cells(rows: Sequence[dict[str, Any]], phase: str) -> dict[int, dict[int, float]]:
    """batch -> seq_len -> mean ms over every measured forward of the phase's ok rows."""
    sums: dict[tuple[int, int], list[float]] = {}
    for r in ok_rows(rows):
        if r.get("phase") != phase or r.get("mean_ms") in (None, ""):
            continue
        key = (int(r["batch_size"]), int(r["seq_len"]))
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += float(r["mean_ms"]) * int(r["iterations"])
        acc[1] += int(r["iterations"])
    out: dict[int, dict[int, float]] = {}
    for (b, s), (total, n) in sums.items():
        out.setdefault(b, {})[s] = round(total / n, 3)
    return out


def write_matrix(path: Path, cells: dict[int, dict[int, float]], batches: Sequence[int], seqs: Sequence[int]) -> Path:
    """ByteMLPerf's matrix CSV: corner cell, one column per batch size, one row per seq_len; empty: unmeasured."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([MATRIX_CORNER, *(str(b) for b in batches)])
        for s in seqs:
            w.writerow([str(s), *(repr(cells[b][s]) if s in cells.get(b, {}) else "" for b in batches)])
    return path


@register_spec
class ModelBenchSpec(Spec):
    """Prefill and decode forward time of an in-process model, as ByteMLPerf's bench_model.py measures it."""

    name = "model-bench"
    help = ("Prefill (context) and one-step decode forward times per batch size and sequence length, as "
            "ByteMLPerf's bench_model.py: context_perf.csv, decode_perf.csv, output.txt, config.json.")
    options_model: ClassVar[type[RunOptions]] = ModelBenchOptions
    not_applicable: ClassVar[frozenset[str]] = _NOT_APPLICABLE
    columns = ("phase", "batch_size", "seq_len", "mean_ms", "median_ms", "min_ms", "max_ms", "cv_pct",
               "iterations", "measured_ms", "timer")  # fmt: skip
    total_field = "mean_ms"

    def __init__(self) -> None:
        self.spec_dir = Path(".")
        self.options: ModelBenchOptions | None = None
        self.live: list[dict[str, Any]] = []  # this run's measured rows, for the files rewritten after each cell

    def setup(self, ctx: SpecContext) -> list[Case]:
        import torch

        from lmmbench.models.attention import apply_attention, precision_settings

        opts = ctx.options
        assert isinstance(opts, ModelBenchOptions)
        self.spec_dir, self.options = ctx.spec_dir, opts
        torch.manual_seed(opts.seed)
        if opts.threads:
            torch.set_num_threads(int(opts.threads))
        check_before_loading(opts)  # from config.json: nothing is loaded for a run that cannot be measured
        loaded = load_spec_model(opts.model, opts.device, opts.dtype)
        timer, time_ms = _timer(loaded.device)
        ctx.state.update(loaded=loaded, time_ms=time_ms, timer=timer)
        ctx.environment.update(
            attention=apply_attention(loaded.model, opts.attn_implementation), matmul_precision=precision_settings(),
            model={"name": loaded.ref.name, "class": type(loaded.model).__name__, "dtype": str(loaded.dtype),
                   "device": str(loaded.device)}, timer=timer, torch_threads=torch.get_num_threads())  # fmt: skip
        self._write_config(opts, ctx.environment)
        cases = []
        for phase in PHASES:
            if phase not in opts.phases:
                continue
            for b in opts.context_batch_sizes if phase == "context" else opts.batch_sizes:
                for s in opts.seq_lens:
                    extra = {"phase": phase, "batch_size": b, "seq_len": s}
                    cases.append(Case(id=f"{phase}-b{b}-s{s}", group=phase, params=dict(extra), extra=extra))
        return cases

    def _write_config(self, opts: ModelBenchOptions, environment: dict[str, Any]) -> None:
        config = {"model": opts.model, "model_info": environment.get("model"), "timer": environment.get("timer"),
                  "perf_config": {"perf_context": "context" in opts.phases, "perf_decode": "decode" in opts.phases,
                                  "batch_size_list": opts.batch_sizes,
                                  "context_batch_size_list": opts.context_batch_sizes, "seq_len_list": opts.seq_lens,
                                  "warmup_iters": opts.warmup_iters, "budget_s": opts.budget_s,
                                  "max_iters": opts.max_iters},
                  "options": opts.model_dump(mode="json")}  # fmt: skip
        (self.spec_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        import torch

        opts = ctx.options
        assert isinstance(opts, ModelBenchOptions)
        loaded = ctx.state["loaded"]
        phase, b, s = case.params["phase"], int(case.params["batch_size"]), int(case.params["seq_len"])
        gen = torch.Generator().manual_seed(opts.seed + 7919 * b + s)
        vocab = int(loaded.model.config.vocab_size)
        ids = torch.randint(min(10, vocab - 1), vocab, (b, s), generator=gen).to(loaded.device)
        with torch.inference_mode():
            step, after = self._step(loaded, phase, ids)
            times = measure_cell(step, after, ctx.state["time_ms"], opts.warmup_iters, opts.budget_s * 1e3,
                                 opts.max_iters)  # fmt: skip
        mean = sum(times) / len(times)
        sd = statistics.stdev(times) if len(times) > 1 else None
        row = {"mean_ms": mean, "median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
               "cv_pct": 100 * sd / mean if sd is not None and mean > 0 else None, "iterations": len(times),
               "measured_ms": sum(times), "timer": ctx.state["timer"]}  # fmt: skip
        if not ctx.warmup:
            self.live.append({**case.extra, "status": "ok", **row})
            self._write_files(self.live, opts)
        return row

    @staticmethod
    def _step(loaded: Any, phase: str, ids: Any) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
        """The timed call of a phase (and the untimed call after it)."""
        import torch

        from lmmbench.engines.cache_names import cache_kwarg, returned_cache

        model = loaded.model
        if phase == "context":
            return (lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1)), None
        b, s = ids.shape
        cache = returned_cache(model(input_ids=ids, use_cache=True, logits_to_keep=1))
        if cache is None:
            raise UserError(f"{type(model).__name__} returned no KV cache: decode cannot be timed")
        token = ids[:, :1]
        kwargs = {cache_kwarg(model): cache, "position_ids": torch.full((b, 1), s, device=ids.device),
                  "cache_position": torch.tensor([s], device=ids.device), "use_cache": True,
                  "logits_to_keep": 1}  # fmt: skip

        def step() -> Any:
            return model(input_ids=token, **kwargs)

        return step, lambda: cache.crop(-1)  # back to seq_len tokens: every step sees the same cache

    def _write_files(self, rows: Sequence[dict[str, Any]], opts: ModelBenchOptions) -> None:
        """context_perf.csv / decode_perf.csv (the phases asked for) and output.txt from ``rows``."""
        lines = []
        for phase in PHASES:
            if phase not in opts.phases:
                continue
            cells = _cells(rows, phase)
            batches = opts.context_batch_sizes if phase == "context" else opts.batch_sizes
            write_matrix(self.spec_dir / f"{phase}_perf.csv", cells, batches, opts.seq_lens)
            lines += [f"{phase}, batch_size={b}, seq_len={s}, avg_duration_ms={cells[b][s]}"
                      for b in batches for s in opts.seq_lens if s in cells.get(b, {})]  # fmt: skip
        (self.spec_dir / "output.txt").write_text("".join(x + "\n" for x in lines), encoding="utf-8")

    def clear_cache(self, ctx: SpecContext) -> None:
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def teardown(self, ctx: SpecContext) -> None:
        ctx.state.pop("loaded", None)

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        opts = self.options
        if opts is not None:
            self._write_files(rows, opts)  # every cell of the results file, a resumed run's earlier ones too
        return {f"{phase}_ms": {str(b): v for b, v in _cells(rows, phase).items()} for phase in PHASES}

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        fig, axes = new_figure(2)
        for ax, phase in zip(axes, PHASES, strict=True):
            for b, by_seq in sorted(_cells(rows, phase).items()):
                seqs = sorted(by_seq)
                ax.plot(seqs, [by_seq[s] for s in seqs], marker="o", label=f"batch {b}")
            ax.set_title(f"{phase}: mean forward ms")
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel("ms")
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        save_figure(fig, path)
        return True
