"""Observation and action conventions of LeRobot and openpi (``--policy-keys lerobot|openpi|native``), so that
their policies run on lmmbench's environments without a wrapper.

* ``native``: the environment's own observation (``image``, ``wrist_image``, ``state``, ``instruction``, ...) and
  lmmbench's normalized action (Push-T: [-1, 1] onto the board; LIBERO: openpi's 32-wide, its first 7 values).
* ``lerobot`` (LeRobot's ``preprocess_observation`` and ``LiberoProcessorStep``, lerobot 0.4.x): each camera under
  ``observation.image`` (one camera, as LeRobot's Push-T) or ``observation.images.<camera>`` (LIBERO: ``image`` the
  agent view, ``image2`` the wrist), float32 channel-first in [0, 1]; ``observation.state`` float32 (Push-T: the
  agent's position in pixels; LIBERO: end-effector position, axis-angle, the two gripper fingers); ``task`` the
  instruction. Batched policies get these stacked on dim 0 (``task`` a list of strings).
* ``openpi`` (``examples/libero/main.py`` of openpi): ``observation/image``, ``observation/wrist_image`` uint8
  ``(H, W, 3)`` as resized with padding, ``observation/state`` (LIBERO: eef position, axis-angle, gripper; Push-T:
  the agent's position in pixels) and ``prompt`` the instruction, unbatched.

With ``lerobot`` and ``openpi`` the policy's action is in the environment's own units, as those projects send
it: LIBERO's 7 values go to its controller as they are; Push-T's 2 values are the agent's target in pixels.
``KeyedEnv`` wraps an environment that declares its ``key_map`` (and ``raw_action_space``, ``step_raw``) so that
the scheduler, the warm-up and the probe step see the chosen convention; the policy is built and driven as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["POLICY_KEYS", "KeyMap", "KeyedEnv", "detect_policy_keys", "keyed_observation"]

POLICY_KEYS = ("native", "lerobot", "openpi")


@dataclass(frozen=True)
class KeyMap:
    """How an environment's native observation maps to LeRobot's and openpi's keys.

    ``cameras``: (native key, LeRobot key, openpi key) per camera; ``state_key``: the native key of the state the
    two projects call ``observation.state`` / ``observation/state`` (its raw values come from the environment's
    ``raw_state()`` when it has one)."""

    cameras: tuple[tuple[str, str, str], ...]
    state_key: str = "state"
    instruction_key: str = "instruction"


def _lerobot_image(image: Any) -> np.ndarray:
    """An ``(H, W, 3)`` uint8 frame as LeRobot's policies take it: float32 ``(3, H, W)`` in [0, 1]."""
    arr = np.asarray(image)
    out = arr.astype(np.float32) / 255.0 if arr.dtype == np.uint8 else arr.astype(np.float32)
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def keyed_observation(obs: dict[str, Any], keys: str, key_map: KeyMap, raw_state: Any = None) -> dict[str, Any]:
    """``obs`` (an environment's native observation) in ``keys``' convention (see the module docstring)."""
    if keys == "native":
        return obs
    state = np.asarray(obs[key_map.state_key] if raw_state is None else raw_state)
    instruction = str(obs.get(key_map.instruction_key, ""))
    if keys == "lerobot":
        out: dict[str, Any] = {lr: _lerobot_image(obs[native]) for native, lr, _ in key_map.cameras}
        out["observation.state"] = state.astype(np.float32)
        out["task"] = instruction
        return out
    if keys == "openpi":
        out = {op: np.asarray(obs[native], dtype=np.uint8) for native, _, op in key_map.cameras}
        out["observation/state"] = state
        out["prompt"] = instruction
        return out
    raise ValueError(f"policy keys {keys!r}: one of {', '.join(POLICY_KEYS)}")


def _module_roots(cls: type) -> set[str]:
    return {c.__module__.split(".")[0] for c in cls.__mro__}


def detect_policy_keys(factory: Any) -> str | None:
    """The convention a policy class is written for, from the class itself: ``lerobot`` for a subclass of
    LeRobot's ``PreTrainedPolicy`` (or a class that declares ``config_class`` and ``name`` as LeRobot's policies
    must) with ``select_action`` / ``predict_action_chunk``; ``openpi`` for a subclass of a class of
    ``openpi`` / ``openpi_client`` (their ``BasePolicy``); None when the class does not say."""
    if not isinstance(factory, type):
        return None
    roots = _module_roots(factory)
    acts_like_lerobot = any(callable(getattr(factory, m, None)) for m in ("select_action", "predict_action_chunk"))
    if acts_like_lerobot and ("lerobot" in roots or (getattr(factory, "config_class", None) is not None
                                                     and isinstance(getattr(factory, "name", None), str))):
        return "lerobot"
    if callable(getattr(factory, "infer", None)) and roots & {"openpi", "openpi_client"}:
        return "openpi"
    return None


class KeyedEnv:
    """An environment seen through ``keys``: observations in that convention, actions in the environment's own
    units (the environment's ``step_raw``), ``action_space`` the environment's ``raw_action_space``."""

    def __init__(self, env: Any, keys: str) -> None:
        self.env = env
        self.keys = keys
        self.key_map: KeyMap = env.key_map
        self.action_space = getattr(env, "raw_action_space", None)

    def _convert(self, obs: Any) -> dict[str, Any]:
        raw = getattr(self.env, "raw_state", None)
        return keyed_observation(obs, self.keys, self.key_map, raw() if callable(raw) else None)

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """The environment's reset, its observation in this convention."""
        obs, info = self.env.reset(seed=seed)
        return self._convert(obs), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """``action`` in the environment's own units, stepped; the observation in this convention."""
        obs, reward, terminated, truncated, info = self.env.step_raw(action)
        return self._convert(obs), reward, terminated, truncated, info

    def render(self) -> Any:
        """The environment's frame (``--record-replay``, ``video_out_path``)."""
        return self.env.render()

    def close(self) -> None:
        """Close the environment."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)
