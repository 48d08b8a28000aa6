"""One exit-code rule for every command, plans and the drop-in commands included (docs/reliability.md).

0 — everything asked for was measured (in a load test, failed requests are part of the measurement: its
error rate); 1 — a bug (one line naming the saved traceback); 2 — bad input, or nothing could be measured
(every sample, request or row failed); 3 — partial: some samples, rows or points failed, with the count
printed; 4 — everything was measured and a comparison it was asked for found a difference (``run episodic-eval
--compare-serial`` / ``--reference``: "not equivalent", with the first difference printed); 130 / 143 — interrupted
by SIGINT / SIGTERM.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BUG", "NOTHING_MEASURED", "NOT_EQUIVALENT", "OK", "PARTIAL", "failure_reason", "measured_exit_code",
           "plan_exit_code"]

OK = 0
BUG = 1
NOTHING_MEASURED = 2  # the same code as bad input: nothing usable came out
PARTIAL = 3
NOT_EQUIVALENT = 4  # a comparison's negative verdict (not bad input, not a failed measurement)


def measured_exit_code(ok: int, failed: int) -> int:
    """The code of a run that measured ``ok`` items and failed ``failed``: 2 when nothing was measured, 3 when
    some failed, else 0."""
    if ok <= 0:
        return NOTHING_MEASURED
    return PARTIAL if failed > 0 else OK


def plan_exit_code(rows: Iterable[tuple[bool, bool]]) -> int:
    """A plan's code from its rows' ``(failed, hit_a_bug)``: 1 if any row hit a bug, else 2 if every row
    failed, else 3 if some failed, else 0."""
    states = list(rows)
    if any(bug for _, bug in states):
        return BUG
    failed = sum(1 for f, _ in states if f)
    return measured_exit_code(len(states) - failed, failed) if states else OK


def failure_reason(errors: Iterable[str | None]) -> str | None:
    """What the failures of a run that measured nothing share, for its one error line: the first error, then
    "(every failure alike)" when every error reads the same once paths and numbers are set aside, else how many
    kinds there were; None when no error was recorded."""
    import re

    first: str | None = None
    kinds: set[str] = set()
    for error in errors:
        if not error:
            continue
        text = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        first = first or text
        kinds.add(re.sub(r"\d+", "N", re.sub(r"(/|[A-Za-z]:\\)\S+", "PATH", text)))
    if first is None:
        return None
    return f"{first} ({'every failure alike' if len(kinds) == 1 else f'{len(kinds)} kinds of failure'})"
