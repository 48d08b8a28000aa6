"""The VLA-shaped policy on CUDA: ``--device`` / ``--dtype`` honoured or refused, and ``--cuda-graphs`` (the
action-expert call replayed from per-batch-size CUDA graphs, ``models.vla_graphs``). This machine has no GPU:
the eager fallback and every refusal run here for real; the graph-replay equivalence test runs only on a CUDA
machine and is SKIPPED here with its reason (a skip is not a pass: ``benchmarks/gpu_check.py --only pi0`` checks
the same on a GPU)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from lmmbench.cli.main import main
from lmmbench.episodes import EpisodeKey, EpisodeScheduler
from lmmbench.episodes.compare import read_traces
from lmmbench.episodes.policies.vla import VlaPolicy
from lmmbench.models.vla_graphs import AeCallRunner, resolve_graph_mode

ACTION_TOL = 1e-5  # episodic-eval's batched-vs-serial tolerance (episodes.compare.compare_runs)
NO_CUDA = "needs a CUDA GPU: CUDA-graph capture and replay cannot run on a CPU-only machine (gpu_check --only pi0)"


class _Frames:
    """A stand-in environment with Push-T's observation layout (112-pixel image, 2-D state) and no physics,
    named so: every step gives a new seeded frame, so every action call sees new inputs."""

    def __init__(self, task: int) -> None:
        self.task, self.t, self.seed = task, 0, 0

    def _obs(self) -> dict[str, Any]:
        rng = np.random.default_rng(self.seed + 1000 * self.t + 7 * self.task)
        return {"image": rng.integers(0, 256, (112, 112, 3), dtype=np.uint8), "state": rng.random(2),
                "instruction": "push the T " * (1 + self.task % 3)}

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.t, self.seed = 0, seed or 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), 0.0, False, False, {}


def _episodes(policy: VlaPolicy, parallel: int) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Three short episodes with ``parallel`` slots: each episode's action chunks, and the run totals."""
    keys = [EpisodeKey(t, 0) for t in range(3)]
    sched = EpisodeScheduler(_Frames, policy, keys, num_parallel=parallel, num_steps_wait=1, max_steps=12, seed=3)
    traces = {r.key.id: r.trace for r in sched.run()}
    return traces, sched.totals.as_dict()


def _max_diff(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> float:
    assert a.keys() == b.keys() and all(len(a[k]) == len(b[k]) for k in a)
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for k in a for x, y in zip(a[k], b[k], strict=True))


def test_eager_fallback_on_cpu_gives_the_plain_paths_actions_and_says_why() -> None:
    """``auto`` off CUDA runs eager, records the reason, captures nothing, charges no setup time; its actions are
    the plain (``off``) path's, bit for bit (same device, same kernels), over batched episodes."""
    torch.set_num_threads(1)
    plain, p_totals = _episodes(VlaPolicy("pi0-tiny"), 3)
    fallback_policy = VlaPolicy("pi0-tiny", cuda_graphs="auto")
    fallback, f_totals = _episodes(fallback_policy, 3)
    assert _max_diff(plain, fallback) == 0.0
    assert max(int(b) for b in f_totals["action_batch_histogram"]) > 1  # batched calls went through the runner
    report = fallback_policy.ae_call.report()
    assert report["mode"] == "eager" and "CUDA graphs need a CUDA device" in report["fallback_reason"]
    assert report["captures"] is None and f_totals["policy_setup_ms"] == 0.0 == p_totals["policy_setup_ms"]
    # the runner's eager path is sample_actions itself
    model = fallback_policy.model
    gen = torch.Generator().manual_seed(0)
    inputs = (torch.rand(2, 1, 3, 112, 112, generator=gen), torch.randint(1, 512, (2, 64), generator=gen),
              torch.ones(2, 64, dtype=torch.bool), (torch.rand(2, 32, generator=gen), torch.rand(2, 32, generator=gen)),
              torch.full((2,), 0.5), torch.randn(2, 32, 32, generator=gen))
    with torch.inference_mode():
        direct = model.sample_actions(*inputs)
    assert torch.equal(AeCallRunner(model, *resolve_graph_mode("auto", torch.device("cpu")))(*inputs), direct)


def test_graph_mode_resolution_refuses_on_without_cuda() -> None:
    assert resolve_graph_mode("off", torch.device("cpu")) == ("eager", None)
    assert resolve_graph_mode("auto", torch.device("cuda"))[0] == "cuda-graphs"  # no device touched
    with pytest.raises(ValueError, match="need a CUDA device"):
        resolve_graph_mode("on", torch.device("cpu"))
    with pytest.raises(ValueError, match="need a CUDA device"):
        VlaPolicy("pi0-tiny", cuda_graphs="on")  # the policy refuses before building its weights


def _run(out: Path, *flags: str, policy: str = "pi0-tiny", env: str = "pusht") -> int:
    return main(["run", "episodic-eval", "--env", env, "--policy", policy, "--num-tasks", "2",
                 "--num-trials-per-task", "1", "--max-steps", "6", "--num-steps-wait", "1", "--warmup", "0",
                 "--no-progress", "--out-dir", str(out), *flags])


def test_cuda_flags_refused_in_one_line_on_a_machine_without_cuda(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """No CUDA here: ``--device cuda`` and ``--cuda-graphs on`` are refused by name (exit 2, one line), as are
    ``--dtype`` / ``--cuda-graphs`` with a policy that has no pi0 action-expert call; no run folder is left."""
    assert not torch.cuda.is_available(), "this test describes a machine without CUDA"
    cases = [("pi0-tiny", ["--device", "cuda"], "--device cuda: CUDA is not available"),
             ("pi0-tiny", ["--cuda-graphs", "on"], "--cuda-graphs on: CUDA graphs need a CUDA device"),
             ("toy", ["--cuda-graphs", "auto"], "--cuda-graphs auto: --policy toy"),
             ("toy", ["--dtype", "bfloat16"], "--dtype bfloat16: --policy toy")]
    for i, (policy, flags, expected) in enumerate(cases):
        capsys.readouterr()
        env = "pusht" if policy == "pi0-tiny" else "toy-waypoints"
        assert _run(tmp_path / str(i), *flags, policy=policy, env=env) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and expected in err[0], err
        assert "Traceback" not in err[0] and not (tmp_path / str(i) / "episodic-eval" / "run.json").exists()


def test_dtype_and_the_eager_fallback_through_the_cli(tmp_path: Path) -> None:
    """``--dtype bfloat16`` runs the pi0 policy in bf16 (other actions than float32, recorded in run.json);
    ``--cuda-graphs auto`` on CPU gives the float32 run's actions exactly and records the fallback's reason."""
    torch.set_num_threads(1)
    runs = {"plain": [], "bf16": ["--dtype", "bfloat16"], "fallback": ["--cuda-graphs", "auto"]}
    traces, env = {}, {}
    for name, flags in runs.items():
        assert _run(tmp_path / name, "--threads", "1", *flags) == 0
        spec_dir = tmp_path / name / "episodic-eval"
        traces[name] = {k: v.trace for k, v in read_traces(spec_dir / "episodic-eval_traces.jsonl").items()}
        env[name] = json.loads((spec_dir / "run.json").read_text())["run"]["episodic_eval"]
    assert _max_diff(traces["plain"], traces["fallback"]) == 0.0
    assert _max_diff(traces["plain"], traces["bf16"]) > ACTION_TOL  # bf16 rounding moves the actions
    assert env["plain"]["dtype"] == "float32" and env["bf16"]["dtype"] == "bfloat16"
    assert env["plain"]["ae_call"] == {"mode": "eager", "fallback_reason": None, "captures": None}
    assert "CUDA graphs need a CUDA device" in env["fallback"]["ae_call"]["fallback_reason"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_replay_equals_eager_and_captures_once_per_batch_size(dtype: torch.dtype) -> None:
    """On CUDA: batched episodes with graphs give eager's actions within the batched-vs-serial tolerance; one
    capture per batch size seen, each replayed later; capture time is kept out of the action time."""
    eager, _ = _episodes(VlaPolicy("pi0-tiny", device="cuda", dtype=dtype), 3)
    policy = VlaPolicy("pi0-tiny", device="cuda", dtype=dtype, cuda_graphs="on")
    graphed, totals = _episodes(policy, 3)
    assert _max_diff(eager, graphed) <= ACTION_TOL
    captures = policy.ae_call.captures
    sizes = sorted(int(b) for b in totals["action_batch_histogram"])
    assert sorted(c.batch_size for c in captures) == sizes and all(c.capture_ms > 0 for c in captures)
    assert totals["policy_setup_ms"] > 0
    assert sum(c.replays for c in captures) == totals["action_calls"]


class _ToyWithCaptureStandIn:
    """The toy policy plus a stand-in for a CUDA-graph capture (a sleep of ``pause_s`` on the first call of each
    batch size, reported through ``take_setup_ns`` as a capture is), named so: the capture cannot run here."""

    def __init__(self, pause_s: float) -> None:
        from lmmbench.episodes.policies.toy import ToyWaypointPolicy

        self.inner, self.pause_s = ToyWaypointPolicy(), pause_s
        self.seen: set[int] = set()
        self.reported_ns = self._pending = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def act(self, items: Any) -> Any:
        if len(items) not in self.seen:
            self.seen.add(len(items))
            t0 = time.perf_counter_ns()
            time.sleep(self.pause_s)
            self._pending += time.perf_counter_ns() - t0
        return self.inner.act(items)

    def take_setup_ns(self) -> int:
        spent, self._pending = self._pending, 0
        self.reported_ns += spent
        return spent


@pytest.mark.serial
def test_capture_time_is_kept_out_of_the_timed_action_calls_and_the_wall() -> None:
    """Setup a policy reports from inside ``act`` is counted as ``policy_setup_ms`` and left out of the action
    and wall times: with 1 s per batch size injected, the action time stays below one injected pause."""
    from lmmbench.episodes.envs.toy_waypoints import ToyWaypointsEnv

    torch.set_num_threads(1)
    policy = _ToyWithCaptureStandIn(1.0)
    keys = [EpisodeKey(t, 0) for t in range(3)]
    sched = EpisodeScheduler(ToyWaypointsEnv, policy, keys, num_parallel=3, num_steps_wait=0, max_steps=6, seed=0)
    rows = list(sched.run())
    totals = sched.totals.as_dict()
    assert policy.seen and totals["policy_setup_ms"] == pytest.approx(policy.reported_ns / 1e6)
    assert totals["policy_setup_ms"] >= 1000.0 * len(policy.seen)
    assert totals["action_ms"] < 1000.0 and totals["wall_ms"] < 1000.0 * len(policy.seen)
    assert sum(r.action_ms for r in rows) < 1000.0


def test_interleaved_walls_leave_out_the_setup_a_run_returns() -> None:
    from lmmbench.episodes.speedup import interleaved_walls

    def run() -> int:
        t0 = time.perf_counter_ns()
        time.sleep(0.3)
        return time.perf_counter_ns() - t0  # all of it was "setup"

    serial, batched = interleaved_walls(run, lambda: None, 1)
    assert serial[0] < 100.0 and batched[0] < 100.0  # a 300 ms sleep, all reported: left out


class _ReplayStandIn:
    """Stands in for ``torch.cuda.CUDAGraph`` (no CUDA here), named so: ``replay`` recomputes the captured
    function from the static buffers into the same output tensor, as a graph replay does."""

    def __init__(self, fn: Any, out: torch.Tensor) -> None:
        self.fn, self.out = fn, out

    def replay(self) -> None:
        self.out.copy_(self.fn())


def test_graph_runner_bookkeeping_with_a_cpu_stand_in_for_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's own logic with the capture replaced by a CPU stand-in: one capture per batch size, on first
    use; a later call with NEW inputs of a captured size gets their actions (the inputs are copied into the static
    buffers); a returned output is not overwritten by the next replay; capture time is reported once."""
    from lmmbench.models import vla_graphs
    from lmmbench.models.vla import PI0_TINY, build_vla
    from lmmbench.models.vla_bench import ae_call_inputs

    def graph_of(fn: Any) -> tuple[Any, torch.Tensor, float]:
        out = fn()
        return _ReplayStandIn(fn, out), out, 0.0

    monkeypatch.setattr(vla_graphs, "cuda_graph_of", graph_of)
    torch.set_num_threads(1)
    model = build_vla(PI0_TINY)
    runner = AeCallRunner(model, "cuda-graphs")
    eager = AeCallRunner(model, "eager")
    cpu = torch.device("cpu")
    a2 = ae_call_inputs(PI0_TINY, 2, 1, cpu, torch.float32, seed=0)
    b2 = ae_call_inputs(PI0_TINY, 2, 1, cpu, torch.float32, seed=5)
    a3 = ae_call_inputs(PI0_TINY, 3, 1, cpu, torch.float32, seed=0)
    first = runner(*a2)
    assert runner.take_setup_ns() > 0 and runner.take_setup_ns() == 0
    second = runner(*b2)  # same size: replayed, no new capture
    assert runner.take_setup_ns() == 0
    assert torch.equal(second, eager(*b2)) and not torch.equal(second, first)
    assert torch.equal(first, eager(*a2))  # the earlier output was a copy: the replay did not overwrite it
    assert torch.equal(runner(*a3), eager(*a3))
    assert [(c.batch_size, c.cameras, c.replays) for c in runner.captures] == [(2, 1, 2), (3, 1, 1)]
    assert runner.report()["captures"][1]["batch_size"] == 3
