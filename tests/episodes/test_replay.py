"""``--record-replay``: one MP4 per episode named by task and trial, that PyAV decodes with one frame
after reset and one per step (warm-up steps included)."""

from __future__ import annotations

import csv
from pathlib import Path

from lmmbench.cli.main import main


def test_replay_writes_one_decodable_mp4_per_episode(tmp_path: Path) -> None:
    import av

    assert main(["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "2", "--num-parallel", "2",
                 "--max-steps", "6", "--num-steps-wait", "2", "--warmup", "1", "--record-replay", "--no-progress",
                 "--out-dir", str(tmp_path)]) == 0
    spec_dir = tmp_path / "episodic-eval"
    with (spec_dir / "episodic-eval_results.csv").open(newline="") as fh:
        rows = {r["sample_id"]: r for r in csv.DictReader(fh)}
    videos = sorted(p.name for p in (spec_dir / "replay").iterdir())
    assert videos == sorted(f"{sid}.mp4" for sid in rows)  # task<T>_trial<R>.mp4; no warm-up episode
    for sid, row in rows.items():
        with av.open(str(spec_dir / "replay" / f"{sid}.mp4")) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert len(frames) == 1 + int(row["warmup_steps"]) + int(row["steps"]), sid
        assert frames[0].shape == (128, 128, 3)


def test_replay_of_a_gym_id_environment(tmp_path: Path) -> None:
    import av

    assert main(["run", "episodic-eval", "--env", "gym:CartPole-v1", "--num-tasks", "1", "--num-trials-per-task", "1",
                 "--max-steps", "4", "--num-steps-wait", "0", "--warmup", "0", "--record-replay", "--no-progress",
                 "--out-dir", str(tmp_path)]) == 0
    with av.open(str(tmp_path / "episodic-eval" / "replay" / "task0_trial0.mp4")) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 1 + 4  # reset + 4 steps (CartPole does not fall within 4 random pushes)
