"""Time one ``generate(max_new_tokens=1)`` stage by stage.

TTFT here is the wall time of moving the packed inputs to the model device plus
``generate(max_new_tokens=1)``, synchronised once at the end on CUDA. The stage hooks
(``profiling.hooks.StageHooks``) put spans on a ``Timeline``; ``profiling.stages`` folds them
into the fields of docs/ttft-breakdown.md plus the split of ``others_ms``.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any

from lmmbench.core.clock import now_ns, ns_to_ms
from lmmbench.profiling.hooks import StageHooks
from lmmbench.profiling.stages import stage_breakdown, unmeasured_fields
from lmmbench.profiling.timeline import Timeline

__all__ = ["BreakdownResult", "run_generate_with_breakdown"]


@dataclass
class BreakdownResult:
    """Stage fields (ms), the wall TTFT, the timer used, and the generated ids.

    ``dropped`` holds every hook dropped so far in the run (name -> error) and ``unmeasured`` the
    fields those hooks leave unmeasured: ``measured_fields()`` gives them as None, not as 0."""

    fields: dict[str, float]
    ttft_wall_ms: float
    timer: str
    output_ids: Any
    hook_errors: list[str]
    dropped: dict[str, str] = field(default_factory=dict)
    unmeasured: tuple[str, ...] = ()

    def measured_fields(self) -> dict[str, float | None]:
        """``fields`` with the unmeasured ones set to None (an empty cell)."""
        return {k: (None if k in self.unmeasured else v) for k, v in self.fields.items()}

    def row_status(self) -> dict[str, str]:
        """``status=degraded`` and the dropped hooks' errors for a spec row, or nothing when all hooks run."""
        if not self.dropped:
            return {}
        return {"status": "degraded", "error": "; ".join(self.dropped.values())}


def _to_device(inputs: Any, device: Any, dtype: Any = None) -> dict[str, Any]:
    """A new dict of the inputs on ``device`` (floating tensors cast to ``dtype`` when given);
    the caller's inputs are left untouched, so every repeat pays the same transfer."""
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if hasattr(value, "to") and hasattr(value, "is_floating_point"):
            if dtype is not None and value.is_floating_point():
                value = value.to(device=device, dtype=dtype)
            else:
                value = value.to(device)
        out[key] = value
    return out


def run_generate_with_breakdown(
    model: Any,
    inputs: Any,
    device: Any,
    hooks: StageHooks | None = None,
    generate_kwargs: dict[str, Any] | None = None,
) -> BreakdownResult:
    """Run ``generate(max_new_tokens=1)`` once with ``hooks`` active and return its breakdown.

    ``model`` is the model ``generate`` is called on (``hooks.modules.generation_model`` when
    hooks are given). With ``hooks=None`` only the TTFT (root span) is measured.
    """
    gm = hooks.modules.generation_model if hooks is not None else model
    use_cuda = getattr(device, "type", str(device)) == "cuda"
    timeline = Timeline(use_cuda=use_cuda)
    kwargs = {"max_new_tokens": 1, "do_sample": False, **(generate_kwargs or {})}
    if hooks is not None:
        hooks.activate(timeline)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # no collector pause inside the measurement (as timeit does)
    t0 = now_ns()
    try:
        root = timeline.open("ttft")
        sid = timeline.open("input_transfer")
        dev_inputs = _to_device(inputs, device, getattr(gm, "dtype", None))
        timeline.close(sid)
        sid = timeline.open("generate")
        output_ids = gm.generate(**dev_inputs, **kwargs)
        timeline.close(sid)
        timeline.close(root)
    finally:
        if gc_was_enabled:
            gc.enable()
        if hooks is not None:
            hooks.deactivate()
        timeline.close_all()
    spans = timeline.resolve()  # the one synchronisation of the measurement
    wall_ms = ns_to_ms(now_ns() - t0)
    merge_in_forward = hooks is not None and hooks.modules.multimodal and hooks.modules.wrapper is None
    fields = stage_breakdown(spans, merge_in_forward=merge_in_forward)
    if hooks is None:
        return BreakdownResult(fields, wall_ms, timeline.timer_kind, output_ids, [])
    study = hooks.study.result_ms()  # the study's own timer: the first forward minus the encoders inside it
    fields["prefill_study_timer_ms"] = study if study is not None else 0.0
    if hooks.study.error is not None and "study_prefill_timer" not in hooks.dropped:
        hooks.dropped["study_prefill_timer"] = hooks.study.error
        hooks.errors.append(hooks.study.error)
    unmeasured = unmeasured_fields(hooks.dropped_categories())
    # without a multimodal wrapper the forward's own code is the merge: no separate glue is measured
    unmeasured += ("prefill_forward_glue_ms",) * merge_in_forward + ("prefill_study_timer_ms",) * (study is None)
    return BreakdownResult(fields, wall_ms, timeline.timer_kind, output_ids, list(hooks.errors),
                           dict(hooks.dropped), unmeasured)
