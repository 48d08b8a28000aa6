"""`--profile`: a torch profiler trace of one chosen sample whose ranges name the breakdown's stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.profiling.stages import STAGE_FIELDS
from lmmbench.profiling.trace_ranges import RANGE_PREFIX
from lmmbench.reports import read_rows


@pytest.mark.serial  # compares the profiled run's stage times with the measured ones: no second worker beside it
def test_profile_trace_ranges_name_the_breakdown_stages(tmp_path: Path) -> None:
    assert main(["run", "ttft-breakdown", "--model", "tiny-vl", "--out-dir", str(tmp_path), "--repeats", "2",
                 "--warmup", "0", "--threads", "1", "--no-progress", "--limit", "1", "--profile",
                 "--profile-repeat", "1"]) == 0  # fmt: skip
    spec_dir = tmp_path / "ttft-breakdown"
    trace_path = spec_dir / "ttft-breakdown_trace_video_1s_r1.json"
    events = json.loads(trace_path.read_text())["traceEvents"]  # Chrome / Perfetto trace format
    ranges: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith(RANGE_PREFIX):
            field = e["name"][len(RANGE_PREFIX) :]
            ranges[field] = ranges.get(field, 0.0) + e["dur"] / 1e3  # inclusive ms
    breakdown = json.loads(trace_path.with_suffix(".breakdown.json").read_text())  # the profiled run's own fields
    assert set(ranges) <= set(STAGE_FIELDS)  # every range is a breakdown stage
    # sums and checks of other fields are no span of their own
    derived = {"unattributed_pct", "others_ms", "prefill_ms", "prefill_outside_forward_ms", "prefill_study_timer_ms"}
    timed = {f for f in STAGE_FIELDS if f not in derived and breakdown[f] > 0}
    assert timed <= set(ranges), timed - set(ranges)  # every stage that took time is a range
    assert {"ttft_ms", "visual_encoder_ms", "llm_prefill_ms", "others_cache_setup_ms"} <= set(ranges)
    for field in ("ttft_ms", "visual_encoder_ms", "llm_prefill_ms"):  # the range covers the stage's own time
        # record_function opens before the stage's timer starts and closes after it stops, so the
        # profiler's own bookkeeping at the range edges can only add to it (seen: +1.5 ms on 8.7 ms)
        assert breakdown[field] * 0.95 - 0.5 <= ranges[field] <= breakdown[field] * 1.25 + 0.5, (field, ranges,
                                                                                               breakdown)
    rows = read_rows(spec_dir / "ttft-breakdown_results.csv")
    assert [(r["sample_id"], r["repeat"]) for r in rows] == [("video_1s", "0"), ("video_1s", "1")]  # not a row
    run = json.loads((spec_dir / "run.json").read_text())
    assert str(trace_path) in json.dumps(run)


def test_unknown_profile_sample_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "ttft-breakdown", "--model", "tiny-llm", "--out-dir", str(tmp_path), "--repeats", "1",
                 "--warmup", "0", "--no-progress", "--limit", "1", "--profile", "--profile-sample", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--profile-sample nope" in err and "Traceback" not in err
