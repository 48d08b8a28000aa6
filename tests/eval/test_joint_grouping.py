"""The joint grouping (`--group-by subject+answer`) on the shipped sample_mc task gives the cross table: one group
per pair of values, each the mean of its samples' per-sample scores (recomputed here from the task's own data
file and results/sample_mc_metrics.csv), while `a,b` keeps meaning each column separately. A malformed
joint grouping is refused with one line (exit 2)."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from lmmbench.cli.main import main

DATA = Path(__file__).resolve().parents[2] / "src" / "lmmbench" / "evaluation" / "tasks" / "data" / "sample_mc.jsonl"


def test_joint_grouping_gives_the_cross_table(tmp_path: Path) -> None:
    out = tmp_path / "e"
    assert main(["eval", "--model", "tiny-llm", "--tasks", "sample_mc", "--group-by", "subject+answer,answer",
                 "--threads", "1", "--out-dir", str(out)]) == 0
    run = next(out.iterdir())
    docs = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    with (run / "results" / "sample_mc_metrics.csv").open(newline="") as fh:
        acc = {int(r["doc_id"]): float(r["acc"]) for r in csv.DictReader(fh)}
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for i, doc in enumerate(docs):
        cells[(str(doc["subject"]), str(doc["answer"]))].append(acc[i])
    with (run / "summary" / "sample_mc_by_subject+answer.csv").open(newline="") as fh:
        got = {(r["subject"], r["answer"]): (int(r["n"]), float(r["acc"])) for r in csv.DictReader(fh)}
    assert got == {k: (len(v), pytest.approx(sum(v) / len(v), abs=1e-12)) for k, v in cells.items()}
    assert len({s for s, _ in got}) == 3 and len(got) > 3  # a real cross of two columns
    # 'a,b' (here: answer beside the joint entry) is still a grouping of its own
    assert (run / "summary" / "sample_mc_by_answer.csv").is_file()
    md = (run / "summary" / "summary.md").read_text(encoding="utf-8")
    assert "## sample_mc: acc by subject × answer" in md and "| subject / answer |" in md
    groups = json.loads((run / "results" / "sample_mc.json").read_text())["groups"]
    assert set(groups) == {"subject", "subject+answer", "answer"}


def test_malformed_joint_grouping_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--model", "tiny-llm", "--tasks", "sample_mc", "--group-by", "subject+",
                 "--out-dir", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "--group-by 'subject+'" in err and "Traceback" not in err
