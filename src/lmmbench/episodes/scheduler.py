"""The slot scheduler: many episodes at once, one batched action call per tick.

Each of ``num_parallel`` slots runs one episode at a time through WAIT -> NEED_VLM -> NEED_AE ->
EXECUTING -> DONE. A slot owns a task and runs its trials one after another, then takes the next
task (``num_parallel`` task environments at once). When no task is left, a free slot
takes a trial not yet started from the slot with the most left (on its own environment of that
task, with ``steal_trials=True``; the default, as the episodic design, keeps one task per slot), so the run
does not end with one slot working through a whole task alone. Every tick, in this order:

1. WAIT slots step the warm-up action (the suite's own, LIBERO's is openpi's; else the policy's
   ``dummy_action()``); after ``num_steps_wait`` steps they need planning;
2. EXECUTING slots step one action of their chunk (steps 1 and 2 are one phase: with
   ``env_workers`` they run in worker processes at once, ``episodes.envs.workers``); when it is used
   up they need planning or the action expert (the policy says which); an episode that terminates, truncates or reaches
   ``max_steps`` is DONE;
3. NEED_VLM slots plan: one call per slot, or one call for all of them when the policy's
   planning is batched;
4. all NEED_AE slots share ONE action call (inputs stacked on dim 0 by the policy); a policy with
   ``batched_action = False`` (one observation per call: ``episodes.policies.adapters``) gets one call per slot,
   each timed and counted as a call of batch 1; a request whose place in ``act``'s answer holds an exception
   instead of a chunk (a served policy's fault, ``episodes.policies.remote``) ends its episode, failed with that
   cause, and the other slots go on;
5. DONE slots yield their result (calling the policy's optional ``end_episode(memory)``) and start their
   next episode.

``totals`` keeps every call's time by batch size, every env step's time, the waypoints of every plan (a
policy's ``plan`` may set ``memory.data["plan_size"]``) and every episode's step and replan counts: the terms
of the design's cost model (``episodes.cost_model``).

With ``num_parallel=1`` this is the serial evaluation, episode after episode. An episode's
outcome depends only on its seed: the environment is reset with it (or, ``reset_by_trial``, with the trial
number: LIBERO's trial i starts from initial state i, as openpi's evaluation) and the policy's noise comes
from the episode's own generator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmmbench.core.clock import now_ns, ns_to_ms
from lmmbench.episodes.protocols import (
    ActItem,
    Env,
    EpisodeKey,
    EpisodeMemory,
    EpisodeResult,
    Policy,
    SlotState,
    episode_seed,
)

__all__ = ["EpisodeScheduler", "RunTotals", "success_of"]


def success_of(info: dict[str, Any]) -> bool | None:
    """The environment's own verdict (``success`` or ``is_success`` in info), None when it gives none."""
    for key in ("success", "is_success"):
        if key in info:
            return bool(info[key])
    return None


def _worker_died() -> type[Exception]:
    """The exception of a dead environment worker (``episodes.envs.workers`` imported only when it is needed)."""
    from lmmbench.episodes.envs.workers import WorkerDied

    return WorkerDied


def _take_setup_ns(policy: Any) -> int:
    """Setup time the policy spent inside its last calls (``take_setup_ns()``, optional: 0 without it)."""
    take = getattr(policy, "take_setup_ns", None)
    return int(take()) if callable(take) else 0


@dataclass
class RunTotals:
    """Whole-run counters: ticks, calls and where the wall time went."""

    ticks: int = 0
    wall_ns: int = 0
    env_ns: int = 0
    planning_ns: int = 0
    action_ns: int = 0
    action_calls: int = 0
    planning_calls: int = 0
    action_batch_sizes: list[int] = field(default_factory=list)
    action_call_ms: dict[int, list[float]] = field(default_factory=dict)  # batch size -> each call's ms
    planning_call_ms: dict[int, list[float]] = field(default_factory=dict)
    env_step_ms: list[float] = field(default_factory=list)  # each env step's own time (warm-up included)
    plan_sizes: list[int] = field(default_factory=list)  # waypoints per replan, where the policy says
    episode_steps: list[int] = field(default_factory=list)  # env steps per episode (warm-up included)
    episode_replans: list[int] = field(default_factory=list)
    setup_ns: int = 0  # one-off setup inside policy calls (CUDA-graph captures), kept out of every other time
    env_build_ns: int = 0  # building environments (a LIBERO scene: seconds), here or in a worker
    env_reset_ns: int = 0  # resetting them at the start of every episode
    env_workers_start_ns: int = 0  # --env-workers: starting the worker processes until each answered (spawn: seconds)
    has_planner: bool = True  # False: the policy never plans, and planning is reported as absent, not as 0

    def action_batch_histogram(self) -> dict[str, int]:
        """How many action calls had each batch size."""
        return {str(b): len(v) for b, v in sorted(self.action_call_ms.items())}

    def as_dict(self) -> dict[str, Any]:
        """Milliseconds and counts: environment steps, builds and resets, planning (absent without a planner),
        action calls, and the rest of the wall time as ``scheduler_ms`` (the scheduling itself); the action batch
        per call and per request, the histograms and the cost model's terms (``episodes.cost_model.run_terms``)."""
        from lmmbench.episodes.cost_model import run_terms

        parts = (self.env_ns + self.planning_ns + self.action_ns + self.env_build_ns + self.env_reset_ns
                 + self.env_workers_start_ns)
        sizes = self.action_batch_sizes
        planner = self.has_planner
        return {
            "ticks": self.ticks,
            "wall_ms": ns_to_ms(self.wall_ns),
            "env_ms": ns_to_ms(self.env_ns),
            "env_build_ms": ns_to_ms(self.env_build_ns),
            "env_reset_ms": ns_to_ms(self.env_reset_ns),
            "env_workers_start_ms": ns_to_ms(self.env_workers_start_ns),
            "planning_ms": ns_to_ms(self.planning_ns) if planner else None,
            "action_ms": ns_to_ms(self.action_ns),
            "scheduler_ms": ns_to_ms(self.wall_ns - parts),
            "policy_setup_ms": ns_to_ms(self.setup_ns),
            "action_calls": self.action_calls,
            "planning_calls": self.planning_calls if planner else None,
            "action_requests": sum(sizes),
            # per call: the mean batch of the calls; per request: the batch a request met, on average (calls
            # weighted by their size). 23 calls at 1 and 7 at 4 are 1.70 per call and 2.68 per request.
            "mean_action_batch_per_call": sum(sizes) / len(sizes) if sizes else None,
            "mean_action_batch_per_request": sum(b * b for b in sizes) / sum(sizes) if sizes else None,
            "mean_action_batch_size": sum(sizes) / len(sizes) if sizes else None,  # per call (the older name)
            "max_action_batch_size": max(sizes) if sizes else None,
            "action_batch_histogram": self.action_batch_histogram(),
            "planning_batch_histogram": {str(b): len(v) for b, v in sorted(self.planning_call_ms.items())}
            if planner else None,
            "terms": run_terms(self),
        }


@dataclass(eq=False)
class _Slot:
    index: int
    task: int
    env: Env
    trials: deque[int]
    state: SlotState = SlotState.DONE
    key: EpisodeKey | None = None
    memory: EpisodeMemory | None = None
    obs: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    chunk: deque[Any] = field(default_factory=deque)
    wait_left: int = 0
    steps: int = 0
    reward: float = 0.0
    finished_info: dict[str, Any] = field(default_factory=dict)
    warmup_steps: int = 0
    warmup_reward: float = 0.0
    start_ns: int = 0  # shifted forward by the caller's time between results, so wall time excludes it
    env_ns: int = 0
    planning_ns: float = 0.0
    action_ns: float = 0.0
    planning_calls: int = 0
    action_calls: int = 0
    action_sizes: list[int] = field(default_factory=list)
    planning_sizes: list[int] = field(default_factory=list)
    error: str | None = None  # why the episode failed (its environment worker died)

    def item(self) -> ActItem:
        assert self.memory is not None
        return ActItem(self.memory, self.obs, self.info)


class EpisodeScheduler:
    """Runs ``episodes`` on ``num_parallel`` slots; ``run()`` yields each result as its episode ends."""

    def __init__(self, make_env: Callable[[int], Env], policy: Policy, episodes: Sequence[EpisodeKey], *,
                 num_parallel: int, num_steps_wait: int, max_steps: int, seed: int,
                 steal_trials: bool = False, recorder: Any = None, env_workers: int = 0,
                 warmup_action: Any = None, reset_by_trial: bool = False, batch_check: Any = None,
                 worker_start: str = "fork") -> None:
        if num_parallel < 1 or max_steps < 1 or num_steps_wait < 0:
            raise ValueError("num_parallel and max_steps must be >= 1, num_steps_wait >= 0")
        self.make_env = make_env
        self.policy = policy
        self.num_parallel = num_parallel
        self.num_steps_wait = num_steps_wait
        self.max_steps = max_steps
        self.seed = seed
        self.steal_trials = steal_trials
        self.recorder = recorder  # episodes.replay.ReplayRecorder: a frame after reset and every step
        self.env_workers = env_workers  # > 0: environments live in this many worker processes
        self.warmup_action = warmup_action  # the environment's own (LIBERO: openpi's); None: policy.dummy_action()
        self.reset_by_trial = reset_by_trial  # reset(seed=trial): trial i from initial state i (LIBERO, as openpi)
        self.worker_start = worker_start  # how they start: fork, or spawn (a simulator that cannot be forked)
        self._pool: Any = None  # episodes.envs.workers.EnvWorkers while the run is on
        self.batch_check = batch_check  # episodes.batch_check.BatchCheck: batched calls recomputed one by one
        self.has_planner = getattr(policy, "has_planner", True)  # ActOnly policies never plan: no planning calls
        self.totals = RunTotals(has_planner=self.has_planner)
        self.episodes_done = 0
        self.effective_parallel = 0  # slots that ran: at most num_parallel, fewer when fewer tasks were given
        by_task: dict[int, list[int]] = {}
        for key in sorted(set(episodes)):
            by_task.setdefault(key.task, []).append(key.trial)
        self._tasks: deque[tuple[int, list[int]]] = deque(by_task.items())
        self._slots: list[_Slot] = []
        self._outside_ns = 0  # time the caller held a yielded result (writing rows): not the run's
        self._t_start = 0

    # -- episode lifecycle -------------------------------------------------------------------
    def _new_env(self, index: int, task: int) -> Env:
        """The environment of ``task`` for slot ``index``: here, or in the slot's worker process."""
        t0 = now_ns()
        env = self._pool.make(index, task) if self._pool is not None else self.make_env(task)
        self.totals.env_build_ns += now_ns() - t0
        return env

    def _close(self, env: Env) -> None:
        """Close an environment the run is done with (``close()`` is optional in the protocol)."""
        close = getattr(env, "close", None)
        if callable(close):
            close()

    def _assign_task(self, index: int) -> _Slot | None:
        if not self._tasks:
            return None
        task, trials = self._tasks.popleft()
        return _Slot(index=index, task=task, env=self._new_env(index, task), trials=deque(trials))

    def _steal(self, index: int) -> _Slot | None:
        """A trial not yet started from the slot with the most left, on a new env of its task."""
        donors = [s for s in self._slots if s.index != index and s.trials]
        if not self.steal_trials or not donors:
            return None
        donor = max(donors, key=lambda s: (len(s.trials), -s.index))
        return _Slot(index=index, task=donor.task, env=self._new_env(index, donor.task),
                     trials=deque([donor.trials.pop()]))

    def _start_episode(self, slot: _Slot) -> None:
        trial = slot.trials.popleft()
        key = EpisodeKey(slot.task, trial)
        seed = episode_seed(self.seed, key)
        fresh = _Slot(index=slot.index, task=slot.task, env=slot.env, trials=slot.trials, key=key,
                      start_ns=now_ns() - self._outside_ns)
        fresh.memory = self.policy.new_episode(key, seed)
        self._slots[slot.index] = fresh
        t0 = now_ns()
        try:
            fresh.obs, fresh.info = slot.env.reset(seed=max(trial, 0) if self.reset_by_trial else seed)
        except _worker_died() as exc:  # the slot's worker process is gone: the episode fails with its cause
            fresh.error, fresh.state = str(exc), SlotState.DONE
            return
        fresh.env_ns = now_ns() - t0
        self.totals.env_reset_ns += fresh.env_ns
        if self.recorder is not None:
            self.recorder.capture(key, slot.env)
        fresh.wait_left = self.num_steps_wait
        fresh.state = SlotState.WAIT if self.num_steps_wait > 0 else self._first_call_state()

    def _step_all(self, moves: list[tuple[_Slot, Any, bool]]) -> list[bool]:
        """This tick's env steps (slot, action, warm-up?): one after another here, or all workers at once
        (the run's env time is then the phase's wall time, each slot's its own step time)."""
        if self._pool is None:
            return [self._step(slot, action, warm) for slot, action, warm in moves]
        t0 = now_ns()
        outs = self._pool.step_many([(slot.env, action) for slot, action, _ in moves]) if moves else []
        self.totals.env_ns += now_ns() - t0
        over: list[bool] = []
        for (slot, _, warm), out in zip(moves, outs, strict=True):
            if isinstance(out, BaseException):  # the slot's worker died: its episode ends, failed with the cause
                slot.error = str(out)
                over.append(True)
                continue
            self.totals.env_step_ms.append(ns_to_ms(out[5]))
            over.append(self._apply(slot, out[:5], out[5], warm))
        return over

    def _step(self, slot: _Slot, action: Any, warm_up: bool = False) -> bool:
        """One env step in this process; returns whether the episode is over."""
        t0 = now_ns()
        out = slot.env.step(action)
        dt = now_ns() - t0
        self.totals.env_ns += dt
        self.totals.env_step_ms.append(ns_to_ms(dt))
        return self._apply(slot, out, dt, warm_up)

    def _apply(self, slot: _Slot, out: tuple[Any, ...], dt: int, warm_up: bool) -> bool:
        """Record one step's outcome. ``total_reward`` sums the rewards of the policy steps counted in
        ``steps``; warm-up steps and their reward are counted on their own."""
        slot.obs, reward, terminated, truncated, slot.info = out
        slot.env_ns += dt
        if self.recorder is not None and slot.key is not None:
            self.recorder.capture(slot.key, slot.env)
        if warm_up:
            slot.warmup_steps += 1
            slot.warmup_reward += float(reward)
        else:
            slot.reward += float(reward)
        return bool(terminated or truncated)

    def _result(self, slot: _Slot) -> EpisodeResult:
        assert slot.key is not None and slot.memory is not None
        extra = {k: v for src in (slot.memory.data, slot.info) for k, v in src.items() if k.startswith("stat_")}
        extra.update(warmup_steps=slot.warmup_steps, warmup_reward=slot.warmup_reward)
        return EpisodeResult(
            key=slot.key, seed=slot.memory.seed, success=success_of(slot.info), steps=slot.steps,
            total_reward=slot.reward, planning_calls=slot.planning_calls, action_calls=slot.action_calls,
            action_batch_sizes=slot.action_sizes, planning_batch_sizes=slot.planning_sizes,
            wall_ms=ns_to_ms(now_ns() - self._outside_ns - slot.start_ns), env_ms=ns_to_ms(slot.env_ns),
            planning_ms=slot.planning_ns / 1e6, action_ms=slot.action_ns / 1e6, slot=slot.index,
            trace=slot.memory.trace, extra=extra, error=slot.error)

    # -- the tick ----------------------------------------------------------------------------
    def _tick_steps(self) -> None:
        """Steps 1 and 2 of the tick: WAIT slots step the dummy action, EXECUTING slots their next one."""
        moves = [(slot, self._warmup(), True) for slot in self._slots if slot.state is SlotState.WAIT]
        moves += [(slot, slot.chunk.popleft(), False) for slot in self._slots if slot.state is SlotState.EXECUTING]
        for (slot, _, warm), over in zip(moves, self._step_all(moves), strict=True):
            if slot.error is not None:  # its worker died during the step: not a step taken
                slot.state = SlotState.DONE
            elif warm:
                self._after_wait(slot, over)
            else:
                self._after_execute(slot, over)

    def _warmup(self) -> Any:
        """The warm-up action: the environment's own when the suite has one (LIBERO: openpi's), else the policy's."""
        return self.warmup_action if self.warmup_action is not None else self.policy.dummy_action()

    def _after_wait(self, slot: _Slot, over: bool) -> None:
        slot.wait_left -= 1
        if over:
            slot.state = SlotState.DONE
        elif slot.wait_left <= 0:
            slot.state = self._first_call_state()

    def _first_call_state(self) -> SlotState:
        """An episode's first call: planning, or the action expert when the policy has no planner."""
        return SlotState.NEED_VLM if self.has_planner else SlotState.NEED_AE

    def _after_execute(self, slot: _Slot, over: bool) -> None:
        slot.steps += 1
        if over or slot.steps >= self.max_steps:
            slot.state = SlotState.DONE
        elif not slot.chunk:
            slot.state = SlotState.NEED_VLM if self.policy.needs_plan(slot.item()) else SlotState.NEED_AE

    def _tick_plan(self) -> None:
        waiting = [s for s in self._slots if s.state is SlotState.NEED_VLM]
        groups = [waiting] if self.policy.batched_planning and waiting else [[s] for s in waiting]
        for group in groups:
            items = [s.item() for s in group]
            copies = self._check_before("planning", group, items)
            t0 = now_ns()
            self.policy.plan(items)
            dt = now_ns() - t0
            self._check_after("planning", copies, items, None)
            self.totals.planning_ns += dt
            self.totals.planning_calls += 1
            self.totals.planning_call_ms.setdefault(len(group), []).append(ns_to_ms(dt))
            for s in group:
                assert s.memory is not None
                if "plan_size" in s.memory.data:
                    self.totals.plan_sizes.append(int(s.memory.data["plan_size"]))
                s.planning_ns += dt / len(group)
                s.planning_calls += 1
                s.planning_sizes.append(len(group))
                s.state = SlotState.NEED_AE

    def _tick_act(self) -> None:
        ready = [s for s in self._slots if s.state is SlotState.NEED_AE]
        if not ready:
            return
        if getattr(self.policy, "batched_action", True):
            self._act_call(ready)
        else:  # a policy that takes one observation per call: one call, timed and counted, per slot
            for slot in ready:
                self._act_call([slot])

    def _act_call(self, ready: list[_Slot]) -> None:
        items = [s.item() for s in ready]
        copies = self._check_before("action", ready, items)
        t0 = now_ns()
        chunks = self.policy.act(items)
        dt = now_ns() - t0
        setup = _take_setup_ns(self.policy)  # a one-off inside act (a CUDA-graph capture): not the call's time
        dt -= setup
        self._outside_ns += setup
        self.totals.setup_ns += setup
        failed = [isinstance(c, BaseException) for c in chunks]  # a request that failed (a served policy's fault)
        if len(chunks) != len(ready) or any(len(c) == 0 for c, f in zip(chunks, failed, strict=False) if not f):
            raise RuntimeError(f"policy {self.policy.name}: act() must return one non-empty chunk per request")
        self._check_after("action", None if any(failed) else copies, items, chunks)
        self.totals.action_ns += dt
        self.totals.action_calls += 1
        self.totals.action_batch_sizes.append(len(ready))
        self.totals.action_call_ms.setdefault(len(ready), []).append(ns_to_ms(dt))
        for s, chunk in zip(ready, chunks, strict=True):
            s.action_ns += dt / len(ready)
            s.action_calls += 1
            s.action_sizes.append(len(ready))
            if isinstance(chunk, BaseException):  # this request failed: its episode ends, failed with the cause
                s.error, s.state = str(chunk), SlotState.DONE
                continue
            s.chunk = deque(chunk)
            s.state = SlotState.EXECUTING

    def _check_before(self, kind: str, slots: list[_Slot], items: list[ActItem]) -> Any:
        """The batch check's copies of a call's requests (None without a check); its time is not the run's."""
        if self.batch_check is None:
            return None
        t0 = now_ns()
        copies = self.batch_check.before(kind, [(s.index, s.key.id if s.key else "", s.steps, it)
                                                for s, it in zip(slots, items, strict=True)])
        self._outside_ns += now_ns() - t0
        return copies

    def _check_after(self, kind: str, copies: Any, items: list[ActItem], chunks: Any) -> None:
        """Each copied request recomputed alone and compared (``episodes.batch_check``), outside the run's time."""
        if copies is None:
            return
        t0 = now_ns()
        self.batch_check.after(kind, copies, items, chunks)
        _take_setup_ns(self.policy)  # a capture for batch 1 made by the check: the check's time, not the run's
        self._outside_ns += now_ns() - t0

    def _tick_done(self) -> Iterator[EpisodeResult]:
        for i, slot in enumerate(list(self._slots)):
            if slot.state is not SlotState.DONE:
                continue
            if slot.key is not None:
                result = self._result(slot)
                self.totals.episode_steps.append(slot.steps + slot.warmup_steps)
                self.totals.episode_replans.append(slot.planning_calls)
                if self.recorder is not None:
                    self.recorder.finish(slot.key)
                end = getattr(self.policy, "end_episode", None)
                if callable(end):
                    end(slot.memory)
                self.episodes_done += 1
                slot.key = None
                t_out = now_ns()
                self.totals.wall_ns = t_out - self._t_start - self._outside_ns
                yield result
                self._outside_ns += now_ns() - t_out
            if not slot.trials:
                nxt = self._assign_task(slot.index) or self._steal(slot.index)
                if nxt is None:
                    continue
                self._close(slot.env)  # the slot moves to another environment
                self._slots[i] = slot = nxt
            self._start_episode(slot)

    def _live(self) -> bool:
        return any(s.state is not SlotState.DONE or s.key is not None or s.trials for s in self._slots)

    def run(self) -> Iterator[EpisodeResult]:
        """Tick until every episode has ended; yields each episode's result when it ends."""
        self._t_start = now_ns()
        if self.env_workers > 0:
            from lmmbench.episodes.envs.workers import EnvWorkers

            self._pool = EnvWorkers(self.make_env, min(self.env_workers, self.num_parallel), self.worker_start)
            self.totals.env_workers_start_ns = self._pool.start_ns
        try:
            yield from self._run_ticks()
        finally:
            for slot in self._slots:  # every environment is closed, also when the run stops early
                self._close(slot.env)
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None

    def _run_ticks(self) -> Iterator[EpisodeResult]:
        for i in range(self.num_parallel):
            slot = self._assign_task(i) or self._steal(i)
            if slot is None:
                break
            self._slots.append(slot)
            self._start_episode(slot)
        self.effective_parallel = len(self._slots)
        while self._live():
            self.totals.ticks += 1
            self._tick_steps()
            self._tick_plan()
            self._tick_act()
            yield from self._tick_done()
        self.totals.wall_ns = now_ns() - self._t_start - self._outside_ns
