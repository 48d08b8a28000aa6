"""Policies in the shapes users hold (``episodes.policies.adapters``), on real episodes of ``toy-waypoints`` with real
tiny torch modules on the CPU: the docs' examples run as written (read from docs/episodes.md "Your policy as
it is"), an nn.Module gets ONE forward per tick holding every NEED_AE slot (a forward hook counts), a
select_action policy gets one instance per slot and ``reset()`` per episode, ``infer`` is recorded as batch 1
(histograms, rows and the serial comparison), and a class of no known shape is one line, exit 2."""

from __future__ import annotations

import csv
import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.core.errors import UserError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "episodes.md"
SECTION = "## Your policy as it is"


def _section() -> str:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index(SECTION)
    return text[start:text.index("\n## ", start + len(SECTION))]


def _example(name: str) -> str:
    found = re.search(rf"<!-- example: {re.escape(name)} -->\s*```python\n(.*?)```", _section(), re.S)
    assert found, f"no example {name} in {DOCS} under {SECTION!r}"
    return found.group(1)


def _commands(policy: str) -> list[str]:
    """The section's ``lmmbench run`` commands for ``--policy policy`` (continuation lines joined), as args."""
    lines = "\n".join(re.findall(r"```bash\n(.*?)```", _section(), re.S)).replace("\\\n", " ").splitlines()
    found = [shlex.split(line)[1:] for line in lines
             if line.startswith("lmmbench run") and f"--policy {policy} " in line]
    assert found, f"no command for --policy {policy} in {SECTION!r}"
    return found


@pytest.fixture
def examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in ("towards.py", "lerobot_style.py", "openpi_style.py"):
        (tmp_path / name).write_text(_example(name), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for mod in ("towards", "lerobot_style", "openpi_style"):
        sys.modules.pop(mod, None)


def _outputs(out_dir: Path) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    spec = out_dir / "episodic-eval"
    run = json.loads((spec / "run.json").read_text())["run"]["episodic_eval"]
    analysis = json.loads((spec / "episodic-eval_analysis.json").read_text())
    with (spec / "episodic-eval_results.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return run, analysis, rows


def _run_doc_command(policy: str) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    (args,) = _commands(policy)
    assert main([*args, "--no-progress"]) == 0
    return _outputs(Path(args[args.index("--out-dir") + 1]))


def test_batched_shapes_run_as_documented(examples: Path) -> None:
    for policy, mode in (("towards.py:Towards", "forward"), ("lerobot_style.py:ChunkPolicy", "predict_action_chunk")):
        run, analysis, rows = _run_doc_command(policy)
        assert run["policy_shape"]["mode"] == mode and run["policy_shape"]["batched"] is True
        assert analysis["policy_shape"]["mode"] == mode
        assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
        # a policy that steers toward the waypoints solves toy-waypoints; a wrong batch split would not
        assert analysis["success"]["overall"]["successes"] >= 6, analysis["success"]
        sizes = {int(b) for b in analysis["run"]["action_batch_histogram"]}
        assert max(sizes) > 1, sizes  # several slots really shared a call


def test_select_action_policy_runs_as_documented(examples: Path) -> None:
    run, analysis, rows = _run_doc_command("lerobot_style.py:QueuePolicy")
    shape = run["policy_shape"]
    assert shape["mode"] == "select_action" and shape["batched"] is False
    assert shape["instances"] == 4  # --num-tasks 4 -> 4 slots: one instance per slot, never more
    assert "policy driven through select_action: one select_action per slot (batch 1)" in analysis["finding"]
    assert set(analysis["run"]["action_batch_histogram"]) == {"1"}
    assert all(set(r["action_batch_sizes"].split()) == {"1"} for r in rows)
    assert analysis["success"]["overall"]["successes"] >= 6  # per-instance queues: episodes do not mix


def test_infer_policy_is_recorded_as_batch_one(examples: Path) -> None:
    run, analysis, rows = _run_doc_command("openpi_style.py:InferPolicy")
    assert run["policy_shape"]["mode"] == "infer" and run["policy_shape"]["batched"] is False
    assert set(analysis["run"]["action_batch_histogram"]) == {"1"} and analysis["run"]["max_action_batch_size"] == 1
    assert all(set(r["action_batch_sizes"].split()) == {"1"} for r in rows)
    speed = analysis["speedup_vs_serial"]
    assert speed["action_call_batch_size"] == 1 and "not a batching speed-up" in speed["compared"]
    # the ratio is called a wall ratio (or not measured when a loaded machine broke a pair), never "faster"
    assert "faster than serial" not in analysis["finding"]
    assert "wall ratio" in analysis["finding"] or speed["measurement_error"], analysis["finding"]
    assert analysis["equivalence"]["outcomes"]["same_outcomes"]  # a deterministic policy: 4 slots equal 1 slot
    assert analysis["cost_model"]["prediction"]["design_formula"].get("predicted_speedup") is None


def test_policy_of_no_known_shape_is_one_line(examples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (examples / "nothing.py").write_text("class Nothing:\n    pass\n", encoding="utf-8")
    assert main(["run", "episodic-eval", "--policy", "nothing.py:Nothing", "--no-progress", "--out-dir", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for needed in ("act(items)", "predict_action_chunk", "select_action", "infer(obs)", "torch.nn.Module"):
        assert needed in err[0], err


def _scheduler(policy: Any, num_parallel: int, trials: int = 2) -> Any:
    from lmmbench.episodes import EpisodeKey, EpisodeScheduler, resolve_suite

    episodes = [EpisodeKey(t, r) for t in range(4) for r in range(trials)]
    return EpisodeScheduler(resolve_suite("toy-waypoints").make_env, policy, episodes, num_parallel=num_parallel,
                            num_steps_wait=0, max_steps=48, seed=0)


def test_one_forward_per_tick_holding_every_need_ae_slot(examples: Path) -> None:
    from lmmbench.episodes import PolicySettings, SlotState, make_policy

    policy: Any = make_policy("towards:Towards", PolicySettings())
    sched = _scheduler(policy, num_parallel=4)
    calls: dict[int, list[tuple[int, int]]] = {}  # tick -> (batch of the forward, NEED_AE slots at that moment)

    def hook(_module: Any, inputs: Any, _out: Any) -> None:
        need_ae = sum(s.state is SlotState.NEED_AE for s in sched._slots)
        calls.setdefault(sched.totals.ticks, []).append((int(inputs[0]["image"].shape[0]), need_ae))

    handle = policy.obj.register_forward_hook(hook)
    try:
        results = list(sched.run())
    finally:
        handle.remove()
    assert len(results) == 8
    assert calls and all(len(c) == 1 for c in calls.values()), calls  # never a loop over slots
    assert all(batch == need_ae for ((batch, need_ae),) in calls.values()), calls
    assert [c[0][0] for _, c in sorted(calls.items())] == sched.totals.action_batch_sizes
    assert max(sched.totals.action_batch_sizes) == 4


def test_select_action_gets_one_instance_per_slot_and_reset_per_episode(examples: Path) -> None:
    import lerobot_style  # the docs' example, saved by the fixture

    from lmmbench.episodes.policies.adapters import adapt_policy

    built: list[Any] = []
    resets: list[int] = []

    class Counted(lerobot_style.QueuePolicy):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            built.append(self)

        def reset(self) -> None:
            resets.append(id(self))
            super().reset()

        def select_action(self, batch: Any) -> Any:
            assert batch["image"].shape[0] == 1  # one slot per call
            return super().select_action(batch)

    policy = adapt_policy(Counted(), "Counted", "cpu", Counted)
    sched = _scheduler(policy, num_parallel=3)
    live: list[set[int]] = []
    act = policy.act
    policy.act = lambda items: live.append({id(it.memory.data["_instance"]) for it in items}) or act(items)  # type: ignore[method-assign]
    results = list(sched.run())
    assert len(results) == 8 and len(built) == 3 == policy.instances  # 3 slots, 3 instances, for 8 episodes
    assert len(resets) == 8 and set(resets) == {id(b) for b in built}  # reset at every episode's start
    assert set(sched.totals.action_batch_histogram()) == {"1"}
    assert sched.totals.action_calls == sum(len(s) for s in live)  # each slot's call counted on its own
    assert all(len(s) >= 1 for s in live)


def test_infer_is_called_once_per_slot_and_counted_as_such(examples: Path) -> None:
    import openpi_style

    from lmmbench.episodes import PolicySettings, make_policy

    calls: list[int] = []
    policy: Any = make_policy("openpi_style:InferPolicy", PolicySettings())
    infer = policy.obj.infer
    policy.obj.infer = lambda obs: calls.append(obs["image"].ndim) or infer(obs)
    sched = _scheduler(policy, num_parallel=4)
    assert len(list(sched.run())) == 8
    assert set(calls) == {3}  # unbatched: (3, 16, 16), no batch dim
    assert len(calls) == sched.totals.action_calls and sched.totals.action_batch_sizes == [1] * len(calls)
    assert isinstance(policy.obj, openpi_style.InferPolicy)


MODULES = '''
import torch


class NoInit(torch.nn.Module):  # nn.Module's own __init__(*args, **kwargs): built without settings
    def forward(self, obs):
        return torch.zeros(obs["image"].shape[0], 2)


class Defaults(NoInit):  # a parameter with a default is not the settings
    def __init__(self, hidden=8):
        super().__init__()
        self.hidden = hidden


class Settings(NoInit):
    def __init__(self, settings):
        super().__init__()
        self.seed = settings.weight_seed


class Broken(NoInit):
    def forward(self, obs):
        raise KeyError("no such camera")
'''


def test_constructor_gets_settings_only_when_its_own_init_takes_them(tmp_path: Path) -> None:
    from lmmbench.episodes import PolicySettings, make_policy

    (tmp_path / "mods.py").write_text(MODULES, encoding="utf-8")
    ref = str(tmp_path / "mods.py")
    assert make_policy(f"{ref}:NoInit", PolicySettings()).mode == "forward"  # type: ignore[attr-defined]
    assert make_policy(f"{ref}:Defaults", PolicySettings()).obj.hidden == 8  # type: ignore[attr-defined]
    assert make_policy(f"{ref}:Settings", PolicySettings(weight_seed=7)).obj.seed == 7  # type: ignore[attr-defined]


def test_errors_of_an_adapted_policy_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mods.py").write_text(MODULES, encoding="utf-8")
    ref = f"{tmp_path / 'mods.py'}:"
    base = ["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "1", "--no-progress"]
    cases = (([f"--policy={ref}Broken", "--num-steps-wait", "0"], "KeyError: 'no such camera'"),
             ([f"--policy={ref}NoInit"], "pass --num-steps-wait 0 or define dummy_action()"))
    for i, (args, says) in enumerate(cases):
        assert main([*base, *args, "--out-dir", str(tmp_path / f"o{i}")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


def test_a_batch_of_the_wrong_size_is_refused() -> None:
    import torch

    from lmmbench.episodes.policies.adapters import adapt_policy

    class One(torch.nn.Module):
        def forward(self, obs: Any) -> Any:
            return torch.zeros(1, 2)  # one action whatever the batch

    policy = adapt_policy(One(), "One", "cpu", One)
    sched = _scheduler(policy, num_parallel=2, trials=1)
    with pytest.raises(UserError, match="dim 0 must be the batch"):
        list(sched.run())


PUSHT_MODULE = '''
import torch

SEEN = []


class Conv(torch.nn.Module):
    """A tiny conv net over Push-T's camera: (B, 224, 224, 3) uint8 in, (B, 2) actions out."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 2, 8, stride=8)

    def forward(self, obs):
        SEEN.append((tuple(obs["image"].shape), list(obs["instruction"]), tuple(obs["state"].shape)))
        x = obs["image"].permute(0, 3, 1, 2).float() / 255.0
        return torch.tanh(self.conv(x).mean(dim=(2, 3)))
'''


def test_nn_module_on_push_t_with_images_and_instructions(tmp_path: Path) -> None:
    pytest.importorskip("gym_pusht")
    (tmp_path / "conv_pusht.py").write_text(PUSHT_MODULE, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        import conv_pusht

        from lmmbench.episodes import EpisodeKey, EpisodeScheduler, PolicySettings, make_policy, resolve_suite

        suite = resolve_suite("pusht")
        probe = suite.make_env(0)  # as the spec does: the warm-up action is zeros of its action space
        try:
            policy: Any = make_policy("conv_pusht:Conv", PolicySettings(probe_env=probe))
        finally:
            probe.close()  # type: ignore[attr-defined]
        sched = EpisodeScheduler(suite.make_env, policy, [EpisodeKey(0, 0), EpisodeKey(1, 0)], num_parallel=2,
                                 num_steps_wait=2, max_steps=3, seed=0)
        results = list(sched.run())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("conv_pusht", None)
    assert len(results) == 2 and all(r.steps == 3 and r.extra["warmup_steps"] == 2 for r in results)
    assert sched.totals.action_batch_sizes == [2, 2, 2]  # both slots in every forward
    shapes, instructions, states = zip(*conv_pusht.SEEN, strict=True)
    assert set(shapes) == {(2, 224, 224, 3)} and set(states) == {(2, 2)}
    assert all(len(i) == 2 and i[0] != i[1] for i in instructions)  # each slot's own task instruction, a list


def test_forward_returning_a_chunk_under_actions_is_executed_whole() -> None:
    import torch

    from lmmbench.episodes.policies.adapters import adapt_policy

    class Chunky(torch.nn.Module):
        def forward(self, obs: Any) -> Any:
            return {"actions": torch.ones(obs["position"].shape[0], 3, 2)}  # (B, H=3, A=2): always (+1, +1)

    policy = adapt_policy(Chunky(), "Chunky", "cpu", Chunky)
    sched = _scheduler(policy, num_parallel=4, trials=1)
    results = list(sched.run())
    assert all(r.action_calls == -(-r.steps // 3) for r in results)  # one call per 3 executed actions
    assert all(len(chunk) == 3 for r in results for chunk in r.trace)
