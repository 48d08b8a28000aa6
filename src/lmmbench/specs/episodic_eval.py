"""Spec ``episodic-eval`` (parallel episodic evaluation as openpi / LIBERO run it): evaluate a policy on
many episodes with cross-episode batching.

Each case is one episode (task, trial); ``setup`` builds the environment suite, the policy and an
``EpisodeScheduler`` over ``--num-parallel`` slots, and each ``run_once`` ticks it until its episode
has ended. Episodes end in any order: each one's trace goes to ``episodic-eval_traces.jsonl`` the
moment it ends, and its CSV row as soon as every episode before it (in task, trial order) has
ended too, so at most ``--num-parallel`` finished episodes wait in memory. ``--resume`` skips the
episodes already in the results file (an episode's outcome depends only on its seed).

``--compare-serial`` first times the same episodes serially (``num_parallel=1``) and batched,
interleaved ``--compare-repeats`` times each (``episodes.speedup``), and the analysis reports
whether every episode has the same success and step count, the largest action difference and the
median speed-up with its min-max; ``--reference`` compares with another run's traces file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from lmmbench.specs.base import Case, RunOptions, Spec, SpecContext, register_spec
from lmmbench.specs.episodic_build import build_run

__all__ = ["DESIGN_CONFIG", "DESIGN_DEFAULTS", "NOT_APPLICABLE", "EpisodicEvalOptions", "EpisodicEvalSpec",
           "plot_episodes"]

#: The shipped config file with the episodic design's evaluation settings (its YAML's keys and values).
DESIGN_CONFIG = Path(__file__).resolve().parent.parent / "episodes" / "eval_waypoint_design.yaml"


def _design_defaults() -> dict[str, Any]:
    import yaml

    data: dict[str, Any] = yaml.safe_load(DESIGN_CONFIG.read_text(encoding="utf-8"))
    return data


#: The option defaults, read from ``DESIGN_CONFIG`` so the CLI's defaults are the design's.
DESIGN_DEFAULTS = _design_defaults()


# RunOptions fields that mean nothing for episodes (no manifest, no stage hooks, no per-sample repeats, no
# attention towers): the CLI does not offer them and a config file that sets one is refused.
NOT_APPLICABLE = frozenset({"manifest", "limit", "hooks", "attn_implementation", "target_ci_pct", "max_repeats",
                            "profile", "profile_sample", "profile_repeat", "video_fps", "max_frames", "interleave",
                            "clear_cache"})  # clear_cache: rows are episodes run side by side, no repeats between


class EpisodicEvalOptions(RunOptions):
    """Options of ``lmmbench run episodic-eval`` (the keys of openpi's LIBERO evaluation YAML are fields of the
    same name)."""

    @model_validator(mode="after")
    def _only_applicable(self) -> EpisodicEvalOptions:
        given = sorted(NOT_APPLICABLE & self.model_fields_set)
        if given:
            raise ValueError(f"{', '.join(given)}: not an option of episodic-eval (episodes are chosen with "
                             "--num-tasks / --num-trials-per-task); remove it")
        return self

    model: str = Field("tiny-llm", description="Chat model of --env chat (built-in name or local directory).")
    repeats: int = Field(1, ge=1, le=1, description="Always 1: episodes repeat through --num-trials-per-task.")
    warmup: int = Field(1, ge=0, description="Unrecorded warm-up episodes (task 0, serial) before the measured ones.")
    env: str = Field("toy-waypoints", description="Environment suite: toy-waypoints, chat, pusht, libero-spatial / "
                     "libero-object / libero-goal / libero-10 / libero-90 (LIBERO; lmmbench[libero]), gym:<id> "
                     "(any gymnasium environment; needs lmmbench[episodes]), or your own class as "
                     "module:Class or path/to/file.py:Class.")
    policy: str | None = Field(None, description="Policy: toy, toy-prefix-cache, chat, random, pi0 / pi0-small / "
                               "pi0-tiny (the episodic design's planner + action expert), or your own "
                               "class as module:Class or path/to/file.py:Class (default: the suite's own).")
    num_tasks: int | None = Field(None, ge=1, description="Tasks 0..N-1 of the suite (default: every task of a "
                                  "suite that has a count, as openpi's evaluation; 8 for the others).")
    task_suite_name: str | None = Field(None, description="openpi's name of a LIBERO suite (libero_spatial, "
                                        "libero_object, libero_goal, libero_10, libero_90): the same as --env "
                                        "libero-spatial etc.")
    seed: int = Field(0, description="openpi's seed: LIBERO's env.seed(seed), once per task environment (default "
                      "on LIBERO: 7, openpi's); also the weight seed of the built-in policies and the default of "
                      "--episode-seed.")
    episode_seed: int | None = Field(None, description="lmmbench's per-episode seeding: each episode's seed is a hash "
                                     "of (this, task, trial); it seeds the policy's noise and, except on LIBERO, the "
                                     "environment's reset (default: --seed).")
    replan_steps: int | None = Field(None, ge=1, description="openpi's replan_steps: your adapted policy's first N "
                                     "actions of each chunk are executed before the next call (a shorter chunk "
                                     "fails; default: 5 with --policy-keys openpi, as openpi; else LeRobot's "
                                     "n_action_steps or the whole chunk).")
    call_timeout_s: float | None = Field(None, gt=0, description="A served policy (--policy ws://): seconds one "
                                         "call may wait for its answer; a request that meets no answer fails its "
                                         "episode (cause: timeout) and the run goes on (default 60).")
    resize_size: int | None = Field(None, ge=1, description="openpi's resize_size: LIBERO's cameras resized with "
                                    "padding to this square (openpi's image_tools.resize_with_pad; default 224).")
    video_out_path: Path | None = Field(None, description="openpi's video_out_path: each episode's frames written "
                                        "as task<T>_trial<R>.mp4 in this folder (as --record-replay, elsewhere).")
    policy_keys: Literal["native", "lerobot", "openpi"] | None = Field(
        None, description="Observation keys and action units of your policy class: lerobot (observation.images.<cam>,"
        " observation.state, task), openpi (observation/image, observation/wrist_image, observation/state, prompt) or "
        "native (the environment's own); default: detected from the class (a LeRobot PreTrainedPolicy or a class "
        "with config_class and name: lerobot; a subclass of openpi's BasePolicy: openpi), else native.")
    num_trials_per_task: int = Field(DESIGN_DEFAULTS["num_trials_per_task"], ge=1,
                                     description="Episodes (trials) per task, each with its own seed (default 50, "
                                     "the episodic design's).")
    num_parallel: int | None = Field(DESIGN_DEFAULTS["num_parallel"], ge=1, description="Slots run at once "
                                     "(default: --num-tasks, as the episodic design); 1 is the serial evaluation.")
    num_steps_wait: int = Field(DESIGN_DEFAULTS["num_steps_wait"], ge=0, description="Warm-up dummy actions at "
                                "the start of every episode (default 10, the episodic design's; a slot in warm-up "
                                "skips the batched action call).")
    max_steps: int | None = Field(None, ge=1, description="Policy steps per episode before it is cut off "
                                  "(default: the suite's).")
    execute_steps: int = Field(1, ge=1, description="Actions executed from each action chunk before the next "
                               "action call (toy policies; 1..4; the pi0 policies execute each chunk for its "
                               "waypoint pair's duration and refuse it).")
    batched_planning: bool = Field(False, description="pi0 policies: plan every NEED_VLM slot of a tick in ONE "
                                   "left-padded planner call (the design's next optimisation); default off: batch "
                                   "1, one slot after another, as the episodic design.")
    cuda_graphs: Literal["off", "on", "auto"] = Field(
        "off", description="pi0 policies: replay each action-expert call (prefix + denoiser) from a CUDA graph "
        "captured per batch size on first use (capture time recorded apart from the timed calls); on: CUDA only "
        "(refused elsewhere); auto: graphs on CUDA, eager elsewhere with the reason in the run log; off: eager.")
    threads: int | None = Field(1, ge=1, description="torch CPU threads (default 1: the toy networks are many "
                                "tiny ops, which more threads slow down).")
    steal_trials: bool = Field(DESIGN_DEFAULTS["steal_trials"], description="A slot with no task left takes a "
                               "trial not yet started from another slot (outcomes unchanged); off (default, the "
                               "episodic design): one task per slot, in order.")
    compare_serial: bool = Field(False, description="Also time the same episodes serially (1 slot) and batched "
                                 "(--num-parallel slots), interleaved --compare-repeats times each, and report the "
                                 "median speed-up of batched over serial with its min-max, and whether the "
                                 "outcomes are equal.")
    compare_repeats: int = Field(5, ge=5, description="Interleaved serial / batched pairs of --compare-serial.")
    env_workers: int = Field(0, ge=0, description="Worker processes that hold the environments and step them in "
                             "parallel each tick (0: in this process; slot i in worker i mod W; spawned for "
                             "LIBERO, forked otherwise); for slow simulators.")
    record_replay: bool = Field(False, description="Write each episode's frames to <out-dir>/episodic-eval/replay/"
                                "task<T>_trial<R>.mp4 (the environment needs render() -> RGB array).")
    reference: Path | None = Field(None, description="Another run's episodic-eval_traces.jsonl to compare with.")


def _listed(value: Any) -> Any:
    return None if value is None else [float(v) for v in value]


def _done_ids(path: Path) -> set[str]:
    import csv

    if not path.is_file():
        return set()
    with path.open(newline="", encoding="utf-8") as fh:
        return {r.get("sample_id", "") for r in csv.DictReader(fh) if r.get("status") == "ok"}


@register_spec
class EpisodicEvalSpec(Spec):
    """Episodes of a policy in an environment suite, batched across episodes; one row per episode."""

    name = "episodic-eval"
    help = ("Evaluate a policy on many episodes with cross-episode batching: success per task, "
            "action batch sizes, env / planning / action time, equivalence with the serial run.")
    options_model: ClassVar[type[RunOptions]] = EpisodicEvalOptions
    not_applicable: ClassVar[frozenset[str]] = NOT_APPLICABLE
    columns = ("seed", "success", "steps", "total_reward", "planning_calls", "action_calls", "action_batch_sizes",
               "mean_action_batch_size", "planning_batch_sizes", "wall_ms", "env_ms", "planning_ms", "action_ms",
               "slot", "near_rounding_boundary", "warmup_steps", "warmup_reward", "waypoints_per_replan")
    stage_fields: ClassVar[tuple[str, ...]] = ("env_ms", "planning_ms", "action_ms")
    total_field = "wall_ms"

    def __init__(self) -> None:
        self._results: Iterator[Any] | None = None
        self._buffer: dict[str, Any] = {}
        self._error: BaseException | None = None
        self._scheduler: Any = None
        self._traces: Any = None
        self._serial: dict[str, Any] | None = None
        self._serial_totals: dict[str, Any] | None = None
        self._reference: dict[str, Any] | None = None  # the --reference run's outcomes, read in setup
        self._findings: dict[str, Any] | None = None
        self._speedup: dict[str, Any] | None = None
        self._num_parallel = 1
        self._batch_check: Any = None  # episodes.batch_check.BatchCheck of the compared run (--compare-serial)
        self._max_steps: int | None = None
        self._policy: Any = None
        self._served: dict[str, Any] | None = None  # --policy ws://: the served policy's report (run.json)

    def setup(self, ctx: SpecContext) -> list[Case]:
        from lmmbench.episodes import EpisodeKey, EpisodeScheduler
        from lmmbench.episodes.compare import TraceFile
        from lmmbench.episodes.custom import check_fit
        from lmmbench.episodes.replay import ReplayRecorder

        opts = ctx.options
        assert isinstance(opts, EpisodicEvalOptions)
        from lmmbench.config.limits import check_limit

        check_limit("episode_steps", opts.max_steps, "--max-steps")  # an environment that never ends stops there
        if opts.reference is not None:  # read before the policy loads and any episode runs: a bad file costs nothing
            from lmmbench.episodes.compare import read_traces

            self._reference = read_traces(Path(opts.reference))
        if opts.threads:
            import torch

            torch.set_num_threads(opts.threads)
        suite, num_tasks, make_env, policy, info = build_run(opts)
        check_fit(policy, make_env(0), info["policy_name"], info["env"], opts.num_steps_wait, suite.warmup_action)
        num_parallel = opts.num_parallel or num_tasks
        max_steps = opts.max_steps or suite.default_max_steps
        episodes = [EpisodeKey(t, r) for t in range(num_tasks) for r in range(opts.num_trials_per_task)]
        results_path = ctx.spec_dir / f"{self.name}_results.csv"
        done = _done_ids(results_path) if opts.resume else set()
        todo = [k for k in episodes if k.id not in done]
        episode_seed = info["episode_seed"]

        def scheduler(keys: list[Any], parallel: int, recorder: Any = None, check: Any = None,
                      workers: int = 0) -> EpisodeScheduler:  # fmt: skip
            return EpisodeScheduler(make_env, policy, keys, num_parallel=parallel,
                                    num_steps_wait=opts.num_steps_wait, max_steps=max_steps, seed=episode_seed,
                                    steal_trials=opts.steal_trials, recorder=recorder, batch_check=check,
                                    env_workers=workers,
                                    warmup_action=suite.warmup_action, reset_by_trial=suite.reset_by_trial,
                                    worker_start=suite.worker_start)

        if opts.warmup:
            for _ in scheduler([EpisodeKey(0, -1 - i) for i in range(opts.warmup)], 1).run():
                pass
        if opts.compare_serial and todo:
            # the serial baseline is the plain loop: its environment in this process
            self._compare_serial(lambda: scheduler(todo, 1),
                                 lambda: scheduler(todo, num_parallel, workers=opts.env_workers),
                                 opts.compare_repeats, num_parallel, len(todo), opts.env_workers,
                                 getattr(policy, "batched_action", True))
        replay_dir = Path(opts.video_out_path) if opts.video_out_path is not None else ctx.spec_dir / "replay"
        recorder = ReplayRecorder(replay_dir) if opts.record_replay or opts.video_out_path is not None else None
        if opts.compare_serial:  # the run whose traces are compared: every batched call recomputed one at a time
            from lmmbench.episodes.batch_check import BatchCheck

            self._batch_check = BatchCheck(policy)
        mark = getattr(policy, "mark_run_start", None)
        if callable(mark):  # --policy ws://: the probe and warm-up calls are not the measured run's
            mark()
        # --env-workers acts at any N (at N = 1 the one slot's environment lives in one worker process)
        self._scheduler = scheduler(todo, num_parallel, recorder, self._batch_check, workers=opts.env_workers)
        self._max_steps = max_steps
        self._results = self._scheduler.run()
        self._traces = TraceFile(ctx.spec_dir / f"{self.name}_traces.jsonl", resume=opts.resume)
        ctx.environment["episodic_eval"] = {
            **{k: v for k, v in info.items() if k not in ("policy_name", "env")},
            "env": suite.name, "policy": policy.name, "num_parallel": num_parallel, "num_tasks": num_tasks,
            "max_steps": max_steps, "episodes": len(episodes), "episodes_this_run": len(todo),
            "batched_planning": policy.batched_planning, "env_workers": opts.env_workers,
            "steal_trials": opts.steal_trials, "num_steps_wait": opts.num_steps_wait,
            "policy_shape": self._policy_shape(policy), "warmup_action": _listed(suite.warmup_action),
            "initial_state": "trial i from the environment's initial state i" if suite.reset_by_trial else
            "reset with the episode's seed"}
        self._num_parallel = num_parallel
        self._policy = policy
        return [Case(id=k.id, group=f"task{k.task}", extra={"task": k.task, "trial": k.trial}) for k in episodes]

    @staticmethod
    def _policy_shape(policy: Any) -> dict[str, Any]:
        """How the policy is driven: ``lmmbench`` (its own act) or an ``episodes.policies.adapters`` mode, whether its
        action calls are batched across slots, and (select_action) how many instances the run built."""
        from lmmbench.episodes.policies.adapters import AdaptedPolicy

        if isinstance(policy, AdaptedPolicy):
            return policy.describe()
        return {"mode": "lmmbench", "batched": getattr(policy, "batched_action", True),
                "action_batch": "one act() per tick for every NEED_AE slot", "instances": None}

    def _compare_serial(self, serial: Any, batched: Any, repeats: int, num_parallel: int, episodes: int,
                        env_workers: int, batched_action: bool = True) -> None:
        """Interleaved serial / batched runs of the same episodes; the first serial run's outcomes are
        the reference of the equivalence check."""
        from lmmbench.episodes.compare import EpisodeOutcome
        from lmmbench.episodes.speedup import interleaved_walls, speedup_summary

        def run_serial() -> int:
            sched = serial()
            outcomes = {r.key.id: EpisodeOutcome(r.success, r.steps, r.trace) for r in sched.run()}
            if self._serial is None:
                self._serial, self._serial_totals = outcomes, sched.totals.as_dict()
            return int(sched.totals.setup_ns)  # CUDA-graph captures: not part of the wall compared

        slots_ran: list[int] = []

        def run_batched() -> int:
            sched = batched()
            for _ in sched.run():
                pass
            slots_ran.append(sched.effective_parallel)
            return int(sched.totals.setup_ns)

        walls = interleaved_walls(run_serial, run_batched, repeats)
        # the N compared is the slots that ran (2 tasks on --num-parallel 8 run 2 slots), not the option's value
        self._speedup = speedup_summary(*walls, max(slots_ran, default=num_parallel), episodes, env_workers,
                                        batched_action)

    def _next_result(self) -> Any:
        assert self._results is not None and self._traces is not None
        from lmmbench.episodes.compare import EpisodeOutcome

        result = next(self._results)
        self._traces.append(result.key.id, EpisodeOutcome(result.success, result.steps, result.trace))
        return result

    def run_once(self, ctx: SpecContext, case: Case) -> dict[str, Any]:
        if ctx.warmup:  # the runner's per-case warm-up: episodes warm up in setup instead
            return {}
        if self._error is not None:
            raise RuntimeError(f"the evaluation stopped: {self._error}")
        while case.id not in self._buffer:
            try:
                result = self._next_result()
            except StopIteration:
                raise RuntimeError(f"{case.id} was not scheduled") from None
            except Exception as exc:
                self._error = exc
                raise
            self._buffer[result.key.id] = result
        r = self._buffer.pop(case.id)
        if r.error is not None:  # its environment worker died: this episode fails with the cause, the run goes on
            raise RuntimeError(r.error)
        sizes = r.action_batch_sizes
        planner = self._scheduler is None or self._scheduler.has_planner  # no planner: planning absent, not 0
        return {
            "seed": r.seed, "success": None if r.success is None else int(r.success), "steps": r.steps,
            "total_reward": r.total_reward, "planning_calls": r.planning_calls if planner else None,
            "action_calls": r.action_calls, "action_batch_sizes": " ".join(map(str, sizes)),
            "mean_action_batch_size": sum(sizes) / len(sizes) if sizes else None,
            "planning_batch_sizes": " ".join(map(str, r.planning_batch_sizes)) if planner else None,
            "wall_ms": r.wall_ms, "env_ms": r.env_ms, "planning_ms": r.planning_ms if planner else None,
            "action_ms": r.action_ms,
            "slot": r.slot, "near_rounding_boundary": r.extra.get("stat_near_rounding_boundary"),
            "warmup_steps": r.extra.get("warmup_steps"), "warmup_reward": r.extra.get("warmup_reward"),
            "waypoints_per_replan": " ".join(map(str, r.extra["stat_waypoints"])) if "stat_waypoints" in r.extra
            else None,
        }

    def teardown(self, ctx: SpecContext) -> None:
        report = getattr(self._policy, "report", None)
        if callable(report) and "episodic_eval" in ctx.environment:  # --policy ws://: the server and its calls
            if self._results is not None:  # a run stopped early: its wall time is final once its generator closes
                self._results.close()  # type: ignore[attr-defined]
            totals = self._scheduler.totals if self._scheduler is not None else None
            self._served = ctx.environment["episodic_eval"]["served_policy"] = report(totals)
            self._policy.close()
        if self._policy is not None and "episodic_eval" in ctx.environment:  # select_action: instances built
            ctx.environment["episodic_eval"]["policy_shape"] = self._policy_shape(self._policy)
        ae_call = getattr(self._policy, "ae_call", None)
        if ae_call is not None and "episodic_eval" in ctx.environment:  # the captures are known only now
            ctx.environment["episodic_eval"]["ae_call"] = ae_call.report()
        if "episodic_eval" in ctx.environment:  # the effective N: the slots that ran an episode of this run's file
            ctx.environment["episodic_eval"]["slots_ran"] = _slots_ran(ctx.spec_dir / f"{self.name}_results.csv")
        if self._results is not None:  # a run stopped early still closes its environments
            self._results.close()  # type: ignore[attr-defined]
        if self._scheduler is not None and "episodic_eval" in ctx.environment:  # N as asked and as it ran
            ctx.environment["episodic_eval"]["num_parallel_effective"] = self._scheduler.effective_parallel
        if self._traces is not None:
            self._traces.close()

    def findings(self, rows: list[dict[str, Any]], analysis: dict[str, Any]) -> dict[str, Any]:
        from lmmbench.episodes.analysis import episodic_findings
        from lmmbench.episodes.compare import compare_runs, read_traces

        del analysis
        totals = self._scheduler.totals.as_dict() if self._scheduler is not None else None
        traces = read_traces(self._traces.path) if self._traces is not None else {}
        from lmmbench.episodes.batch_check import RTOL_BY_DTYPE, dtype_name
        from lmmbench.episodes.verdict import reference_verdict, serial_verdict

        equivalence = None
        if self._serial is not None:
            actions = self._batch_check.report() if self._batch_check is not None else None
            equivalence = serial_verdict(actions, compare_runs(traces, self._serial), self._serial, self._max_steps)
        reference = None
        if self._reference is not None:
            rtol = RTOL_BY_DTYPE[dtype_name(self._policy)]
            reference = reference_verdict(compare_runs(traces, self._reference, rtol), self._reference,
                                          self._max_steps)
        slots = self._scheduler.effective_parallel if self._scheduler is not None else self._num_parallel
        out = episodic_findings(rows, totals, self._serial_totals, equivalence, self._speedup, slots or 1, reference)
        if self._policy is not None:
            shape = out["policy_shape"] = self._policy_shape(self._policy)
            if shape["mode"] != "lmmbench":
                out["finding"] += f"; policy driven through {shape['mode']}: {shape['action_batch']}"
        if self._served is not None:  # --policy ws://: calls, latency, time split and faults, one line
            from lmmbench.episodes.analysis import served_line

            out["served_policy"] = {k: v for k, v in self._served.items() if k != "fault_records"}
            out["finding"] += f"; {served_line(self._served)}"
        self._findings = out
        return out

    def headline(self, analysis: dict[str, Any]) -> dict[str, float | None]:
        """Success rate with its 95 % interval, episodes per second, the speed-up's median and spread."""
        overall = (analysis.get("success") or {}).get("overall") or {}
        run = analysis.get("run") or {}
        speed = analysis.get("speedup_vs_serial") or {}
        wall_s = (run.get("wall_ms") or 0.0) / 1000.0
        count = self._scheduler.episodes_done if self._scheduler is not None else 0
        return {"success_rate": overall.get("success_rate"), "success_ci95_low": overall.get("ci95_low"),
                "success_ci95_high": overall.get("ci95_high"),
                "episodes_per_s": count / wall_s if wall_s > 0 and count else None,
                "speedup_vs_serial_median": speed.get("median"), "speedup_vs_serial_min": speed.get("min"),
                "speedup_vs_serial_max": speed.get("max")}

    def plot(self, rows: list[dict[str, Any]], path: Path) -> bool:
        findings = self._findings if self._findings is not None else self.findings(rows, {})
        plot_episodes(findings, path, self.name)
        return True


def plot_episodes(findings: dict[str, Any], path: Path, title: str) -> None:
    """Success per task with 95 % intervals, and the time split of this run (and the serial one)."""
    from lmmbench.specs.experiment_support import new_figure, save_figure

    fig, (ax1, ax2) = new_figure(2)
    per_task = findings["success"]["per_task"]
    tasks = list(per_task)
    rates = [per_task[t]["success_rate"] or 0.0 for t in tasks]
    low = [r - (per_task[t]["ci95_low"] or 0.0) for r, t in zip(rates, tasks, strict=True)]
    high = [(per_task[t]["ci95_high"] or 0.0) - r for r, t in zip(rates, tasks, strict=True)]
    ax1.bar(tasks, rates, yerr=[low, high], capsize=3, color="C0")
    ax1.set_ylim(0, 1.05)
    ax1.set_xlabel("task")
    ax1.set_ylabel("success rate (95 % Wilson interval)")
    ax1.set_title(title)
    runs = [(name, t) for name, t in (("this run", findings.get("run")), ("serial", findings.get("serial_run"))) if t]
    bottoms = [0.0] * len(runs)
    for i, part in enumerate(("env_ms", "env_build_ms", "env_reset_ms", "env_workers_start_ms", "planning_ms",
                              "action_ms", "scheduler_ms")):
        vals = [max(0.0, float(t.get(part) or 0.0)) for _, t in runs]
        ax2.bar([n for n, _ in runs], vals, bottom=bottoms, color=f"C{i}", label=part.removesuffix("_ms"))
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    ax2.set_ylabel("wall ms")
    ax2.set_title("where the time went")
    if runs:
        ax2.legend(fontsize=8)
    save_figure(fig, path)


def _slots_ran(results: Path) -> int | None:
    """How many distinct slots ran the episodes of a results file (None: no episode in it)."""
    import csv

    try:
        with results.open(newline="", encoding="utf-8") as fh:
            slots = {r.get("slot") for r in csv.DictReader(fh) if r.get("slot") not in (None, "")}
    except OSError:
        return None
    return len(slots) or None
