"""How far apart two float32 results may be when they were computed through different batch sizes, thread counts,
kernels or CPUs.

Such results are equal only by accident: matrix kernels block a batch of 1 and a batch of 8 differently, and a
CPU with AVX-512 runs other kernels than one with AVX2. FIELD-NOTES ("Float32 across CPUs") measured the spread:
about 1e-7 relative between two machines' CPUs, and, on a 2-core AMD EPYC (AVX2), tiny-llm's log-likelihoods at
batch 1 and batch 8 up to 6.9e-8 relative apart (-13.936714172 vs -13.936715126). ``F32_SPREAD_REL`` is the
bound FIELD-NOTES states for values compared across machines (1e-6 relative); a test allows that times a factor
it names and justifies. Values smaller than 1 are compared absolutely (a sum of terms of magnitude ~1 carries
their rounding, however small the sum).

Equality stays where it is a real property: the same batch computed twice in one process, a hook that must not
change a forward, a file written and read back.
"""

from __future__ import annotations

from collections.abc import Sequence

#: FIELD-NOTES: float32 values computed on one CPU equal another's only to about 1e-6 relative.
F32_SPREAD_REL = 1e-6


def f32_close(a: float, b: float, factor: float) -> bool:
    """Whether ``a`` and ``b`` agree within ``factor`` times the float32 cross-kernel spread (relative, and absolute
    below magnitude 1)."""
    return abs(a - b) <= factor * F32_SPREAD_REL * max(1.0, abs(a), abs(b))


def worst_f32_gap(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The largest gap between paired values, in units of ``F32_SPREAD_REL`` (relative, absolute below 1): a test
    asserts it is at most its factor and the failure message says by how much it missed."""
    gaps = (abs(a - b) / (F32_SPREAD_REL * max(1.0, abs(a), abs(b))) for a, b in zip(xs, ys, strict=True))
    return max(gaps, default=0.0)
