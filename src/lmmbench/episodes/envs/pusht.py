"""gym-pusht's Push-T (pymunk rigid-body physics, pygame rendering, headless) as an environment for the
VLA-shaped policy.

The adapter renders the agent's view at 224 x 224 pixels (gym-pusht draws the scene and resizes it), passes
the agent's position (normalized to 0..1) as the proprioception, with the one before it, the episode's time
and the task's instruction; instructions differ in length between tasks, so batched prefixes differ in
length. An action is the policy's normalized output: its first two values, clipped to [-1, 1], are mapped
onto the action space's box (the agent's target position, 0..512 pixels). Success is gym-pusht's
``is_success`` (the T covers the goal). Needs ``pip install 'lmmbench[physics]'`` (gym-pusht).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from lmmbench.core.errors import UserError

__all__ = ["INSTRUCTIONS", "PushTEnv"]

INSTRUCTIONS = (
    "push the T onto the target",
    "push the grey T shaped block so that it covers the green target",
    "move the block",
    "slide the T block into the outlined goal pose without knocking it past the target area",
)
_STEP_S = 0.1  # gym-pusht's control period (10 Hz)


class PushTEnv:
    """One Push-T task: the instruction of ``task`` and gym-pusht's scene, reset by seed."""

    def __init__(self, task: int, image_size: int = 224) -> None:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless pygame
        try:
            import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
            import gymnasium
        except ImportError:
            raise UserError("--env pusht needs gym-pusht: pip install 'lmmbench[physics]'") from None
        self.env = gymnasium.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos", render_mode="rgb_array",
                                  observation_width=image_size, observation_height=image_size)
        self.instruction = INSTRUCTIONS[task % len(INSTRUCTIONS)]
        self.box = self.env.action_space  # gym-pusht's own: the agent's target position, 0..512 px
        # what this adapter accepts: a normalized action of any width; its first two values, clipped to [-1, 1]
        self.action_space = gymnasium.spaces.Box(-np.inf, np.inf, (32,), np.float32)
        self._previous = np.zeros(2, dtype=np.float32)
        self._steps = 0

    def _observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        state = np.asarray(obs["agent_pos"], dtype=np.float32) / 512.0
        out = {"image": obs["pixels"], "state": state, "previous_state": self._previous,
               "instruction": self.instruction, "time_s": self._steps * _STEP_S}
        self._previous = state
        return out

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """A new scene from ``seed``."""
        obs, info = self.env.reset(seed=seed)
        self._steps = 0
        self._previous = np.asarray(obs["agent_pos"], dtype=np.float32) / 512.0
        return self._observation(obs), dict(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Map the normalized action onto the box and step the physics."""
        low, high = self.box.low, self.box.high
        a = np.clip(np.asarray(action, dtype=np.float64).ravel()[: low.size], -1.0, 1.0)
        obs, reward, terminated, truncated, info = self.env.step((low + (a + 1.0) / 2.0 * (high - low)).astype(
            np.float32))
        self._steps += 1
        return self._observation(obs), float(reward), bool(terminated), bool(truncated), dict(info)

    def close(self) -> None:
        """Close gym-pusht's environment (its pygame surfaces)."""
        self.env.close()
