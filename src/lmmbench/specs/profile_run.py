"""``--profile``: one extra, unrecorded ``run_once`` of a chosen sample under the torch profiler.

The trace (``<spec>_trace_<sample>_r<repeat>.json``, Chrome / Perfetto JSON: open it in
ui.perfetto.dev or chrome://tracing) has every stage span as a ``lmmbench::<field>`` range
(lmmbench.profiling.trace_ranges), and ``<...>.breakdown.json`` next to it holds the fields of that
same run, so the two name the same stages. The measured rows are never the profiled run: the
profiler's own overhead stays out of the results. The paths go into run.json (``profile_traces``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from lmmbench.specs.base import Case, Spec, SpecContext

__all__ = ["profile_once"]

log = logging.getLogger(__name__)


def profile_once(spec: Spec, ctx: SpecContext, case: Case, repeat: int) -> dict[str, Any] | None:
    """Profile one run of ``case``; returns its fields (None when the run failed: logged, never fatal)."""
    from lmmbench.profiling.trace_ranges import profile_capture
    from lmmbench.reports.json_files import write_json

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", case.id)
    path = ctx.spec_dir / f"{spec.name}_trace_{safe}_r{repeat}.json"
    use_cuda = getattr(ctx.options, "device", "auto") != "cpu"
    ctx.warmup = True  # unrecorded, like a warm-up run
    try:
        with profile_capture(path, use_cuda=use_cuda):
            fields = spec.run_once(ctx, case)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        log.warning("profiled run of %s failed: %s", case.id, exc)
        ctx.environment["profile_error"] = f"{case.id}: {type(exc).__name__}: {exc}"
        return None
    finally:
        ctx.warmup = False
    write_json(path.with_suffix(".breakdown.json"), {"sample_id": case.id, "after_repeat": repeat, **fields})
    ctx.environment.setdefault("profile_traces", []).append(str(path))
    return fields
