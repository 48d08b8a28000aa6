"""Any ``gymnasium.Env`` as an episodes environment, and a seeded random policy for any action space.

``gym:<id>`` (for example ``gym:CartPole-v1``) names a gymnasium environment in ``--env``;
gymnasium is the optional extra ``lmmbench[episodes]`` and is imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.episodes.protocols import ActItem, ActOnly, EpisodeKey, EpisodeMemory

__all__ = ["GymEnvAdapter", "RandomPolicy", "make_gym_env"]


class GymEnvAdapter:
    """Wraps a ``gymnasium.Env``: ``reset(seed)`` seeds the env and its action space, ``step`` passes through."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.action_space = env.action_space

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset with ``seed`` (gymnasium's ``reset(seed=...)``)."""
        obs, info = self.env.reset(seed=seed)
        return obs, dict(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One gymnasium step."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward), bool(terminated), bool(truncated), dict(info)

    def render(self) -> Any:
        """The wrapped environment's frame (an RGB array when made with ``render_mode="rgb_array"``)."""
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped environment."""
        self.env.close()


def make_gym_env(env_id: str, render_mode: str | None = None) -> GymEnvAdapter:
    """``gymnasium.make(env_id)`` wrapped (``render_mode="rgb_array"`` for replay recording); a missing
    gymnasium or unknown id is a ``UserError``."""
    try:
        import gymnasium
    except ImportError:
        raise UserError(f"--env gym:{env_id} needs gymnasium: pip install 'lmmbench[episodes]'") from None
    try:
        return GymEnvAdapter(gymnasium.make(env_id, render_mode=render_mode))
    except gymnasium.error.Error as exc:
        raise UserError(f"--env gym:{env_id}: {str(exc).splitlines()[0]}") from None


class RandomPolicy(ActOnly):
    """Uniform random actions from the action space, drawn from the episode's own generator.

    Works for every gymnasium ``Box`` / ``Discrete`` / ``MultiDiscrete`` / ... space through
    ``space.sample()`` on a space copy seeded per episode, so batched and serial runs draw the same
    actions. Its "action call" does no model work: it exists to evaluate environments and the
    scheduler itself.
    """

    name = "random"
    batched_planning = False

    def __init__(self, action_space: Any) -> None:
        import copy

        self.action_space = action_space
        fixed = copy.deepcopy(action_space)
        fixed.seed(0)
        self._dummy = fixed.sample()

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """An episode's own copy of the action space, seeded with its seed."""
        import copy

        space = copy.deepcopy(self.action_space)
        space.seed(seed)
        return EpisodeMemory(key=key, seed=seed, generator=space)

    def dummy_action(self) -> Any:
        """A no-op is not defined for every space: the warm-up steps a fixed sample (seed 0)."""
        return self._dummy

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One sampled action per item."""
        chunks: list[list[Any]] = []
        for it in items:
            action = it.memory.generator.sample()
            it.memory.trace.append(action)
            chunks.append([action])
        return chunks
