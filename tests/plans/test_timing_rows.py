"""Timing rows get the machine: on the local pool a perf row takes every slot (it overlaps no other row)
while two eval rows share the slots and overlap; a timing row that did overlap another row on its machine
(its own serve row aside) gets ``contention`` in its result and a warning. The pool's workers here are
small real processes that stand in for rows (they sleep and report their start and end). In a plan that mixes
executors, their pools share the one local pool's slots."""

from __future__ import annotations

import sys
from pathlib import Path

from lmmbench.executors.base import ExecutorSettings
from lmmbench.executors.jobs import Job, RowResult
from lmmbench.executors.pool import Slot, WorkerPool
from lmmbench.executors.runner import mark_contention

_ROW = """
import json, sys, time
from pathlib import Path
job = json.loads(Path(sys.argv[1]).read_text())
start = time.time()
time.sleep(1.5)  # long beside a worker start under load, so two rows that run together overlap
out = {"name": job["name"], "kind": job["kind"], "status": "ok", "host": "h", "started_at_s": start,
       "ended_at_s": time.time()}
Path(sys.argv[1]).with_name("result.json").write_text(json.dumps(out))
"""


def _launch(job: Job, job_path: Path, slot: Slot) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-c", _ROW, str(job_path)], {}


def _overlap(a: RowResult, b: RowResult) -> bool:
    assert a.started_at_s and a.ended_at_s and b.started_at_s and b.ended_at_s
    return a.started_at_s < b.ended_at_s and b.started_at_s < a.ended_at_s


def test_local_pool_gives_a_perf_row_every_slot_and_lets_eval_rows_share(tmp_path: Path) -> None:
    jobs = [Job(name=n, kind=k, config={}, row_dir=str(tmp_path / n), executor="subprocess")  # type: ignore[arg-type]
            for n, k in (("e1", "eval"), ("load", "perf"), ("e2", "eval"), ("e3", "eval"))]  # fmt: skip
    results: dict[str, RowResult] = {}
    WorkerPool(ExecutorSettings(tmp_path, workers=2), _launch, slots=[Slot(0), Slot(1)], nvml=False).run(
        jobs, lambda r: results.__setitem__(r.name, r))
    assert all(r.status == "ok" for r in results.values()), results
    assert not any(_overlap(results["load"], results[e]) for e in ("e1", "e2", "e3"))
    evals = [results[e] for e in ("e1", "e2", "e3")]
    assert any(_overlap(a, b) for i, a in enumerate(evals) for b in evals[i + 1:])  # two slots: side by side


def test_contention_is_written_and_warned_when_a_timing_row_overlapped() -> None:
    def row(name: str, kind: str, start: float, end: float, host: str = "h") -> RowResult:
        return RowResult(name=name, kind=kind, status="ok", host=host, started_at_s=start, ended_at_s=end)

    rows = [row("load", "perf", 10, 20), row("e1", "eval", 15, 20.5), row("e2", "eval", 0, 9),
            row("far", "eval", 12, 18, host="other"), row("bench", "run", 21, 25)]  # fmt: skip
    written: list[RowResult] = []
    warnings = mark_contention(rows, {"load": "ts"}, written.append)
    assert [r.name for r in written] == ["load"]  # e2 ended before, far ran elsewhere, bench after
    assert written[0].contention and "e1" in written[0].contention and "far" not in written[0].contention
    assert len(warnings) == 1 and "row 'load'" in warnings[0]


def test_in_a_mixed_plan_a_perf_row_takes_the_slots_of_every_local_executor(tmp_path: Path) -> None:
    """Two executors of one plan (two pools, as subprocess and venv are) run at the same time under the plan's
    schedule but share its one local pool: the perf row on one overlaps neither eval row of the other, and the two
    eval rows share the two slots (they overlap)."""
    from lmmbench.executors.schedule import run_in_stages

    jobs = [Job(name=n, kind=k, config={}, row_dir=str(tmp_path / n), executor=e)  # type: ignore[arg-type]
            for n, k, e in (("e1", "eval", "b"), ("load", "perf", "a"), ("e2", "eval", "b"))]  # fmt: skip
    pools = {e: WorkerPool(ExecutorSettings(tmp_path, workers=2), _launch, slots=[Slot(0), Slot(1)], nvml=False)
             for e in ("a", "b")}  # fmt: skip
    done: dict[str, RowResult] = {}
    run_in_stages(jobs, done, lambda r: done.__setitem__(r.name, r), lambda wave: wave, pools,
                  lambda name, group, report: pools[name].run(group, report))  # fmt: skip
    assert all(r.status == "ok" for r in done.values()) and len(done) == 3, done
    assert not _overlap(done["load"], done["e1"]) and not _overlap(done["load"], done["e2"])
    assert _overlap(done["e1"], done["e2"])
