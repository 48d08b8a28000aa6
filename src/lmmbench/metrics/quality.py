"""Quality under load: accuracy of the requests of one load point, its interval, and McNemar's exact test of
one point against another on the documents sent at both.

Every request sent counts: one that failed (an HTTP error, a dropped stream, a time-out) was not answered
correctly, so the headline ``accuracy`` is correct / sent, with its Wilson interval over the documents sent;
the accuracy over the answered requests and the failure count stand beside it.

Pure functions of (document, correct) answers; the session layer scores the answers with the task's metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Answer", "PointQuality", "mcnemar_exact", "point_quality", "wilson_interval"]


@dataclass(frozen=True)
class Answer:
    """One request sent: its document (task, doc id), the pass over the tasks it was sent in, whether it was
    answered correctly, whether it met every SLO, and whether it was answered at all (False: it failed)."""

    doc: tuple[str, int]
    pass_no: int
    correct: bool
    met_slo: bool
    answered: bool = True


@dataclass
class PointQuality:
    """Accuracy of one load point: correct / sent (a failed request counts, as not correct), its 95 % Wilson
    interval over the distinct documents sent; the accuracy over the answered requests and the failures beside
    it; correct goodput; McNemar's test against the first point (None at the first point)."""

    sent: int
    answered: int
    failures: int
    docs: int
    correct: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    accuracy_over_answered: float | None
    correct_goodput_qps: float | None
    mcnemar_p: float | None = None
    mcnemar_b: int | None = None  # correct at the first point, wrong here
    mcnemar_c: int | None = None  # wrong at the first point, correct here
    paired_docs: int | None = None
    changed: bool | None = None

    def row(self) -> dict[str, Any]:
        """The summary.csv columns of this point."""
        return {"accuracy": self.accuracy, "accuracy_ci_low": self.ci_low, "accuracy_ci_high": self.ci_high,
                "accuracy_over_answered": self.accuracy_over_answered, "accuracy_correct": self.correct,
                "accuracy_requests_sent": self.sent, "accuracy_requests_answered": self.answered,
                "accuracy_requests_failed": self.failures, "accuracy_docs": self.docs,
                "correct_goodput_qps": self.correct_goodput_qps, "accuracy_mcnemar_p": self.mcnemar_p,
                "accuracy_changed": self.changed}  # fmt: skip


def wilson_interval(successes: float, n: float, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (``successes`` may be fractional: a rate times a count)."""
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of ``b`` against ``b + c`` discordant pairs at 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def first_answers(answers: Sequence[Answer]) -> dict[tuple[str, int], bool]:
    """Correctness per document from its first request (lowest pass) at a point (a failed one: not correct)."""
    out: dict[tuple[str, int], tuple[int, bool]] = {}
    for a in answers:
        if a.doc not in out or a.pass_no < out[a.doc][0]:
            out[a.doc] = (a.pass_no, a.correct and a.answered)
    return {d: c for d, (_p, c) in out.items()}


def point_quality(answers: Sequence[Answer], duration_s: float | None,
                  first: Sequence[Answer] | None = None, alpha: float = 0.05) -> PointQuality:  # fmt: skip
    """Accuracy (correct / sent), its interval over the documents sent, the accuracy over the answered requests
    and correct goodput of ``answers`` (every request sent); with ``first`` (the first point's), McNemar's exact
    test on the documents sent at both (``changed`` when p < ``alpha``)."""
    n = len(answers)
    correct = sum(1 for a in answers if a.correct and a.answered)
    answered = sum(1 for a in answers if a.answered)
    docs = len({a.doc for a in answers})
    acc = correct / n if n else None
    ci = wilson_interval(acc * docs, docs) if acc is not None else None
    good = sum(1 for a in answers if a.correct and a.answered and a.met_slo)
    goodput = good / duration_s if duration_s and math.isfinite(duration_s) and duration_s > 0 else None
    q = PointQuality(n, answered, n - answered, docs, correct, acc, ci[0] if ci else None, ci[1] if ci else None,
                     correct / answered if answered else None, goodput)  # fmt: skip
    if first is not None:
        mine, base = first_answers(answers), first_answers(first)
        paired = sorted(set(mine) & set(base))
        q.mcnemar_b = sum(1 for d in paired if base[d] and not mine[d])
        q.mcnemar_c = sum(1 for d in paired if mine[d] and not base[d])
        q.paired_docs = len(paired)
        q.mcnemar_p = mcnemar_exact(q.mcnemar_b, q.mcnemar_c) if paired else None
        q.changed = None if q.mcnemar_p is None else q.mcnemar_p < alpha
    return q
