"""What an episodic evaluation is made of: environments, policies, episode memory and results.

An environment is gymnasium-style (``reset(seed)`` -> ``(obs, info)``, ``step(action)`` ->
``(obs, reward, terminated, truncated, info)``); any ``gymnasium.Env`` fits through
``episodes.envs.gym_adapter``. A policy has two calls, after a VLA's vision-language model + action expert:

* ``plan(items)``: per slot (like the VLM), or on a batch of slots when ``batched_planning``;
* ``act(items)``: always batched, one call for every slot that needs the action expert this tick;
  it returns one chunk of actions per item, executed one per tick. Optional: ``batched_action = False``
  (the policy takes one observation per call: the scheduler calls ``act`` once per slot and records
  batch 1), ``has_planner = False`` (``ActOnly``: no planning call; planning is reported as absent) and
  ``end_episode(memory)`` (called when an episode ends).

Everything a policy remembers about one episode lives in that episode's ``EpisodeMemory``
(its noise generator included), so batching episodes together cannot mix them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ActItem",
    "ActOnly",
    "Env",
    "EnvSuite",
    "EpisodeKey",
    "EpisodeMemory",
    "EpisodeResult",
    "Policy",
    "SlotState",
    "episode_seed",
]


class SlotState(enum.Enum):
    """The five states of a slot (one running episode)."""

    WAIT = "wait"  # warm-up: stepping dummy actions
    NEED_VLM = "need_vlm"  # needs a planning call
    NEED_AE = "need_ae"  # needs an action-expert call (batched across slots)
    EXECUTING = "executing"  # stepping its action chunk, one action per tick
    DONE = "done"  # finished; its result is recorded and the slot takes the next episode


@runtime_checkable
class Env(Protocol):
    """A gymnasium-style environment."""

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode; the same seed gives the same episode."""
        ...

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Apply one action: observation, reward, terminated, truncated, info."""
        ...


@dataclass(frozen=True, order=True)
class EpisodeKey:
    """Which episode: task index and trial index within the task."""

    task: int
    trial: int

    @property
    def id(self) -> str:
        """The row id in the results CSV."""
        return f"task{self.task}_trial{self.trial}"


def episode_seed(base_seed: int, key: EpisodeKey) -> int:
    """The random seed of one episode: a function of the run's seed, the task and the trial only, so an
    episode gets the same seed whichever slot runs it and whatever runs beside it."""
    import hashlib

    digest = hashlib.sha256(f"{base_seed}/{key.task}/{key.trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class EpisodeMemory:
    """What a policy keeps for one episode: its seed, its noise generator and anything else.

    ``trace`` is what the equivalence check compares between runs: the raw action-expert output
    (arrays) for a control policy, the generated token ids per turn for a chat policy.
    """

    key: EpisodeKey
    seed: int
    generator: Any = None  # torch.Generator (or numpy Generator) of this episode only
    data: dict[str, Any] = field(default_factory=dict)
    trace: list[Any] = field(default_factory=list)


@dataclass
class ActItem:
    """One slot's request to the policy: its memory and the latest observation and info."""

    memory: EpisodeMemory
    observation: Any
    info: dict[str, Any]


class Policy(Protocol):
    """A policy with a planning call and a batched action call."""

    name: str
    batched_planning: bool  # True: plan() takes every slot that needs planning in one call

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Fresh memory (and noise generator) for one episode."""
        ...

    def dummy_action(self) -> Any:
        """The warm-up action stepped during WAIT."""
        ...

    def plan(self, items: Sequence[ActItem]) -> None:
        """Planning for these slots (one item unless ``batched_planning``); results go to memory."""
        ...

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One batched action call: a chunk of actions (executed one per tick) per item."""
        ...

    def needs_plan(self, item: ActItem) -> bool:
        """After a chunk is used up: plan again (NEED_VLM) or only act (NEED_AE)?"""
        ...


class ActOnly:
    """The planning half of a ``Policy`` that never plans (every chunk comes from ``act``): mixed into the
    policies that only act (``SimplePolicy``, the random policy, the adapters of users' policies). The scheduler
    sends their slots straight to the action call and reports planning as absent (``has_planner``), not as calls."""

    batched_planning = False
    has_planner = False

    def plan(self, items: Sequence[ActItem]) -> None:
        """No planning call."""
        del items

    def needs_plan(self, item: ActItem) -> bool:
        """Never plans: every slot goes back to NEED_AE."""
        del item
        return False


@dataclass
class EnvSuite:
    """A named set of tasks: how to build the environment of task ``i`` and the suite's defaults."""

    name: str
    make_env: Callable[..., Env]  # make_env(task, **settings): settings the suite takes (``settings``) by keyword
    num_tasks: int | None  # how many distinct tasks exist (None: any index works)
    default_policy: str
    default_max_steps: int
    description: str = ""
    settings: tuple[str, ...] = ()  # keywords make_env takes (LIBERO: resize_size, env_seed)
    warmup_action: Any = None  # the environment's own warm-up action (LIBERO: openpi's); None: the policy's
    reset_by_trial: bool = False  # reset(seed=trial): trial i starts from the environment's initial state i
    worker_start: str = "fork"  # how --env-workers starts its processes: spawn where the simulator cannot fork


@dataclass
class EpisodeResult:
    """The outcome of one episode, written as one row when it ends.

    ``success`` is None when the environment does not say (no ``success`` / ``is_success`` in
    its info): absent, not a guess. Times are this episode's share: its own env steps, and each
    batched call's time divided by the call's batch size.
    """

    key: EpisodeKey
    seed: int
    success: bool | None
    steps: int
    total_reward: float
    planning_calls: int
    action_calls: int
    action_batch_sizes: list[int]
    planning_batch_sizes: list[int]
    wall_ms: float
    env_ms: float
    planning_ms: float
    action_ms: float
    slot: int
    trace: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the episode failed: why (its environment worker process died)
