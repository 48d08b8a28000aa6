"""Fields a shared run option brings that mean nothing for episodes are refused in an episodic config file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.specs.episodic_eval import NOT_APPLICABLE

#: A value of the right type for each field, so the refusal is for the field, not its value.
VALUES: dict[str, Any] = {"manifest": "m.csv", "limit": 2, "hooks": "off", "attn_implementation": "eager",
                          "target_ci_pct": 3, "max_repeats": 10, "profile": True, "profile_sample": "s0",
                          "profile_repeat": 0, "video_fps": 2.0, "max_frames": 8, "interleave": True,
                          "clear_cache": False}  # fmt: skip


def test_every_not_applicable_field_has_a_value_here() -> None:
    assert set(VALUES) == set(NOT_APPLICABLE)


@pytest.mark.parametrize("field", sorted(NOT_APPLICABLE))
def test_a_config_file_setting_it_is_refused_in_one_line(field: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import json

    config = tmp_path / "episodes.json"
    config.write_text(json.dumps({"num_tasks": 1, "num_trials_per_task": 1, field: VALUES[field]}))
    assert main(["run", "episodic-eval", "--config", str(config), "--out-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "not an option of episodic-eval" in err[0], err
    assert not (tmp_path / "out" / "episodic-eval" / "episodic-eval_results.csv").exists()
