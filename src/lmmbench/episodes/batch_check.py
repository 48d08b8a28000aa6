"""Every batched call of a run recomputed one request at a time on the same inputs: the action half of
``--compare-serial``'s equivalence verdict.

A batched run and a serial run of the same episodes are closed loops: a last-bit difference in one action moves
the next observation, so comparing their traces step by step says little. What batching itself must not change is
the answer to one call: ``BatchCheck`` deep-copies every request of a call that has more than one (its memory with
the episode's noise generator, its observation and info) before the call, and after it runs the policy on each copy
alone (batch 1) and compares what the copy produced with what the batched call produced for that request: the
chunk ``act`` returned, the entries the call appended to the episode's trace and the values it set in the
episode's memory. Action calls are checked; planning calls too when the policy plans a batch at once
(``batched_planning``: chat's replies are generated there). A call with one request is already what a serial run
computes and is counted, not recomputed.

Agreement: integers, strings and every other non-float value exactly; floats within
``rtol(dtype) x max(1, largest |value| of the request)``, ``rtol`` from the dtype the policy computes in (its
``dtype`` attribute, else float32, torch's default, or the outputs' own when they are narrower): float32 1e-5
(batch-size effects of float32 kernels are about 1e-6 relative, another reduction order per row; pi0-tiny's actions
moved by 1.7e-7 relative between batch 6 and batch 1 on a 2-core EPYC; 1e-5 leaves a factor 10 over 1e-6), float64
1e-12, float16 1e-2 and bfloat16 6e-2 (about 10 and 8 units of their last place, which a batched matmul moves by a
few). The first request that does
not agree is named with its call, episode, step and slot. The time spent copying and recomputing is kept out of the
run's times (the scheduler counts it as outside the run, as it does a caller holding a result).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RTOL_BY_DTYPE", "BatchCheck", "dtype_name", "value_diff"]

#: relative tolerance per compute dtype (see the module docstring for why these values)
RTOL_BY_DTYPE = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 6e-2}


def dtype_name(policy: Any, outputs: Any = None) -> str:
    """The dtype the policy computes in: its ``dtype`` attribute (a torch or numpy dtype or a name), else float32
    (torch's default), or float16 / bfloat16 when the outputs themselves are that narrow."""
    own = getattr(policy, "dtype", None)
    if own is not None:
        name = str(own).removeprefix("torch.")
        if name in RTOL_BY_DTYPE:
            return name
    kinds = {str(getattr(v, "dtype", "")).removeprefix("torch.") for v in _leaves(outputs)}
    return next((k for k in ("bfloat16", "float16") if k in kinds), "float32")


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in _leaves(item)]
    if isinstance(value, dict):
        return [x for item in value.values() for x in _leaves(item)]
    return [value]


def _as_array(value: Any) -> np.ndarray | None:
    """A float array of ``value`` when it holds floats (numpy, torch, Python float), else None."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if value.is_floating_point():
            return np.asarray(value.double().numpy())
        return None
    if isinstance(value, float) or (isinstance(value, np.ndarray | np.generic) and np.issubdtype(value.dtype,
                                                                                                 np.floating)):
        return np.asarray(value, dtype=np.float64)
    return None


def value_diff(a: Any, b: Any, where: str = "") -> tuple[float, float, str | None]:
    """(largest |a - b| over float values, largest |b|, the first place where the two differ in kind, shape or a
    non-float value; None when nowhere). ``a`` is the batched call's, ``b`` the one-request call's."""
    fa, fb = _as_array(a), _as_array(b)
    if fa is not None or fb is not None:
        if fa is None or fb is None or fa.shape != fb.shape:
            return 0.0, 0.0, f"{where or 'value'}: {_kind(a)} vs {_kind(b)}"
        if fa.size == 0:
            return 0.0, 0.0, None
        if not (np.isfinite(fa).all() and np.isfinite(fb).all()):
            same = np.array_equal(fa, fb, equal_nan=True)
            return 0.0, 0.0, None if same else f"{where or 'value'}: non-finite values differ"
        return float(np.max(np.abs(fa - fb))), float(np.max(np.abs(fb))), None
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b) and not isinstance(a, type):
        a, b = vars(a), vars(b)
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return 0.0, 0.0, f"{where or 'value'}: keys {sorted(map(str, a))} vs {sorted(map(str, b))}"
        return _fold([value_diff(a[k], b[k], f"{where}.{k}" if where else str(k)) for k in a])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return 0.0, 0.0, f"{where or 'value'}: length {len(a)} vs {len(b)}"
        return _fold([value_diff(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b, strict=True))])
    if hasattr(a, "tolist") and hasattr(b, "tolist"):  # integer arrays and tensors: exact
        a, b = a.tolist(), b.tolist()
    return 0.0, 0.0, None if a == b else f"{where or 'value'}: {str(a)[:60]} vs {str(b)[:60]}"


def _kind(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return f"{type(value).__name__}{tuple(shape) if shape is not None else ''}"


def _fold(parts: list[tuple[float, float, str | None]]) -> tuple[float, float, str | None]:
    diff = max((p[0] for p in parts), default=0.0)
    scale = max((p[1] for p in parts), default=0.0)
    return diff, scale, next((p[2] for p in parts if p[2] is not None), None)


@dataclasses.dataclass
class Request:
    """One request of a checked call: where it came from and its inputs copied before the call."""

    slot: int
    episode: str
    step: int
    item: Any  # a deep copy of the ActItem
    trace_len: int


class BatchCheck:
    """Recomputes every call with more than one request, one request at a time (see the module docstring)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.calls = {"action": 0, "planning": 0}  # calls seen
        self.checked = {"action": 0, "planning": 0}  # of which recomputed (more than one request)
        self.requests_checked = 0
        self.max_abs_diff = 0.0
        self.max_rel_diff = 0.0  # |a - b| / max(1, |b|), the quantity the tolerance bounds
        self.dtype: str | None = None
        self.first_disagreement: dict[str, Any] | None = None
        self.disagreements = 0
        self.error: str | None = None  # why the check stopped (a request that could not be copied or recomputed)

    def before(self, kind: str, requests: Sequence[tuple[int, str, int, Any]]) -> list[Request] | None:
        """Copies of a call's requests ``(slot, episode id, step, item)``, or None when the call is not checked."""
        self.calls[kind] += 1
        if len(requests) < 2 or self.error is not None:
            return None
        try:
            return [Request(slot, episode, step, copy.deepcopy(item), len(item.memory.trace))
                    for slot, episode, step, item in requests]
        except Exception as exc:
            self.error = f"the inputs of a {kind} call could not be copied ({type(exc).__name__}: {exc})"
            return None

    def after(self, kind: str, copies: list[Request] | None, items: Sequence[Any],
              chunks: Sequence[Any] | None) -> None:
        """Recompute each copied request alone and compare it with the batched call's output for it."""
        if copies is None:
            return
        self.checked[kind] += 1
        call = sum(self.checked.values())
        for i, (req, item) in enumerate(zip(copies, items, strict=True)):
            try:
                alone = self.policy.act([req.item]) if kind == "action" else self.policy.plan([req.item])
            except Exception as exc:
                self.error = (f"{kind} call {call}, episode {req.episode}: the request alone raised "
                              f"{type(exc).__name__}: {exc}")
                return
            mine = {"trace": item.memory.trace[req.trace_len:], "memory": _public(item.memory.data)}
            theirs = {"trace": req.item.memory.trace[req.trace_len:], "memory": _public(req.item.memory.data)}
            if kind == "action":
                mine["chunk"], theirs["chunk"] = list(chunks[i]) if chunks is not None else None, list(alone[0])
            self.dtype = self.dtype or dtype_name(self.policy, mine)
            self._compare(kind, call, req, *value_diff(mine, theirs))
            self.requests_checked += 1

    def _compare(self, kind: str, call: int, req: Request, diff: float, scale: float, mismatch: str | None) -> None:
        rtol = RTOL_BY_DTYPE[self.dtype or "float32"]
        rel = diff / max(1.0, scale)
        self.max_abs_diff = max(self.max_abs_diff, diff)
        self.max_rel_diff = max(self.max_rel_diff, rel)
        if mismatch is None and rel <= rtol and math.isfinite(rel):
            return
        self.disagreements += 1
        if self.first_disagreement is None:
            self.first_disagreement = {
                "kind": kind, "call": call, "episode": req.episode, "step": req.step, "slot": req.slot,
                "abs_diff": diff, "rel_diff": rel, "tolerance": rtol, "mismatch": mismatch}

    def report(self) -> dict[str, Any]:
        """The action check's record: what was recomputed, the tolerance and its basis, the largest differences,
        whether every request agreed (None when the check could not finish) and the first that did not."""
        dtype = self.dtype or dtype_name(self.policy)
        agree: bool | None = None if self.error else self.first_disagreement is None
        return {"action_calls": self.calls["action"], "planning_calls": self.calls["planning"],
                "action_calls_recomputed": self.checked["action"],
                "planning_calls_recomputed": self.checked["planning"],
                "requests_recomputed": self.requests_checked, "dtype": dtype, "rtol": RTOL_BY_DTYPE[dtype],
                "tolerance_basis": f"|batched - alone| <= {RTOL_BY_DTYPE[dtype]:g} x max(1, largest |value| of the "
                                   f"request) ({dtype}); non-float values equal",
                "max_abs_diff": self.max_abs_diff, "max_rel_diff": self.max_rel_diff,
                "max_abs_diff_text": f"{self.max_abs_diff:.6e}", "disagreements": self.disagreements,
                "agree": agree, "first_disagreement": self.first_disagreement, "error": self.error}


def _public(data: dict[str, Any]) -> dict[str, Any]:
    """Memory values a call sets, without the ones a policy keeps for itself (``_``-prefixed: an instance)."""
    return {k: v for k, v in data.items() if not str(k).startswith("_")}
