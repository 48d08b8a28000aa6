"""The registries of environment suites and policies, and how ``--env`` / ``--policy`` resolve.

Built in: the ``toy-waypoints`` suite (policies ``toy``, ``toy-prefix-cache``), the ``chat``
suite (policy ``chat``, tiny-llm through ``BatchEngine``), the ``pusht`` physics suite (gym-pusht), LIBERO's
suites ``libero-spatial`` / ``-object`` / ``-goal`` / ``-10`` / ``-90`` (``episodes.envs.libero``) and the
VLA-shaped policies ``pi0`` / ``pi0-small`` / ``pi0-tiny`` (``models.vla``); ``gym:<id>`` wraps any gymnasium
environment (policy ``random``); ``module:Class`` and ``path/to/file.py:Class`` name the user's own
environment or policy (``episodes.custom``). Third-party packages add suites and policies through the entry-point groups
``lmmbench.episode_suites`` and ``lmmbench.episode_policies``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry
from lmmbench.episodes.custom import close_env, is_object_ref, make_custom_env, make_custom_policy
from lmmbench.episodes.envs.libero_suites import LIBERO_SUITES, WARMUP_ACTION
from lmmbench.episodes.protocols import Env, EnvSuite, Policy

__all__ = ["LIBERO_SUITES", "POLICIES", "SUITES", "VLA_POLICIES", "PolicySettings", "make_policy", "resolve_suite"]


@dataclass
class PolicySettings:
    """What a policy factory gets: device, weight seed, chunk execution, planner batching, the suite's task-0 env."""

    device: str = "cpu"
    weight_seed: int = 0
    execute_steps: int = 1
    batched_planning: bool = False  # plan every NEED_VLM slot of a tick in one batch (the pi0 policies' planner)
    model: str = "tiny-llm"
    probe_env: Env | None = None  # an instance of the suite's environment (the gym adapter's action space)
    dtype: str = "float32"  # the pi0 policies' weights and inputs (float32, bfloat16, float16)
    cuda_graphs: str = "off"  # the pi0 policies' action-expert call: off, on (CUDA only), auto (models.vla_graphs)
    control_period_s: float = 0.1  # the environment's control period (LIBERO 0.05 s): the pi0 action expert's input
    replan_steps: int | None = None  # adapted policies: actions executed of each chunk (openpi's replan_steps)
    call_timeout_s: float = 60.0  # a served policy (ws://): seconds one call may wait for its answer


SUITES: Registry[EnvSuite] = Registry("episode_suites")
POLICIES: Registry[Callable[[PolicySettings], Policy]] = Registry("episode_policies")


def _toy_env(task: int) -> Env:
    from lmmbench.episodes.envs.toy_waypoints import ToyWaypointsEnv

    return ToyWaypointsEnv(task)


def _pusht_env(task: int) -> Env:
    from lmmbench.episodes.envs.pusht import PushTEnv

    return PushTEnv(task)


def _chat_env(task: int) -> Env:
    from lmmbench.episodes.envs.chat import ScriptedUserEnv

    return ScriptedUserEnv(task)


SUITES.add("toy-waypoints", EnvSuite(
    "toy-waypoints", _toy_env, None, "toy", 24,
    "2-D point robot visiting 3 waypoints on a 16x16 grid; image-like observations"))
SUITES.add("pusht", EnvSuite(
    "pusht", lambda task: _pusht_env(task), None, "pi0-tiny", 60,
    "gym-pusht's Push-T (pymunk physics, headless pygame rendering at 224 px); tasks differ by instruction"))


def _libero_env(suite: str, task: int, resize_size: int = 224, env_seed: int | None = None) -> Env:
    from lmmbench.episodes.envs.libero import LiberoEnv

    return LiberoEnv(suite, task, image_size=resize_size, env_seed=env_seed)


def _libero_maker(suite: str) -> Callable[..., Env]:
    import functools

    return functools.partial(_libero_env, suite)  # pickles: spawned --env-workers build the scenes themselves


for _suite, (_bench, _max_steps, _tasks) in LIBERO_SUITES.items():
    SUITES.add(_suite, EnvSuite(
        _suite, _libero_maker(_suite), _tasks, "pi0-tiny", _max_steps,
        f"LIBERO's {_bench} (robosuite/MuJoCo, headless EGL): agent-view and wrist cameras at 224 px, "
        "LIBERO's initial states and success check", settings=("resize_size", "env_seed"),
        warmup_action=WARMUP_ACTION, reset_by_trial=True, worker_start="spawn"))
SUITES.add("chat", EnvSuite(
    "chat", _chat_env, None, "chat", 8,
    "multi-turn conversations with a scripted user (2-4 turns; success: the reply says the keyword)"))


def _toy(settings: PolicySettings, prefix_cache: bool) -> Policy:
    from lmmbench.episodes.policies.toy import ToyWaypointPolicy

    return ToyWaypointPolicy(device=settings.device, weight_seed=settings.weight_seed,
                             execute_steps=settings.execute_steps, prefix_cache=prefix_cache)


def _chat(settings: PolicySettings) -> Policy:
    from lmmbench.episodes.envs.chat import ChatPolicy

    return ChatPolicy(model=settings.model, device=settings.device)


def _random(settings: PolicySettings) -> Policy:
    from lmmbench.episodes.envs.gym_adapter import RandomPolicy

    space = getattr(settings.probe_env, "action_space", None)
    if space is None:
        raise UserError("--policy random needs an environment with an action_space (a gym:<id> env)")
    return RandomPolicy(space)


POLICIES.add("toy", lambda s: _toy(s, False))
POLICIES.add("toy-prefix-cache", lambda s: _toy(s, True))
POLICIES.add("chat", _chat)
POLICIES.add("random", _random)


def _vla(settings: PolicySettings, shape: str) -> Policy:
    from lmmbench.episodes.policies.vla import VlaPolicy

    if settings.execute_steps != 1:
        raise UserError(f"--execute-steps {settings.execute_steps}: --policy {shape} executes each action chunk for "
                        "its waypoint pair's duration (the episodic design); remove --execute-steps")
    import torch

    return VlaPolicy(shape, device=settings.device, weight_seed=settings.weight_seed,
                     batched_planning=settings.batched_planning, dtype=getattr(torch, settings.dtype),
                     cuda_graphs=settings.cuda_graphs, control_period_s=settings.control_period_s)


def _vla_factory(shape: str) -> Callable[[PolicySettings], Policy]:
    return lambda settings: _vla(settings, shape)


VLA_POLICIES = ("pi0", "pi0-small", "pi0-tiny")  # models.vla.VLA_SHAPES: pi0's widths, and CPU-sized cuts
for _shape in VLA_POLICIES:
    POLICIES.add(_shape, _vla_factory(_shape))


def resolve_suite(name: str, render: bool = False) -> EnvSuite:
    """A registered suite, or ``gym:<id>`` as a one-task-per-index gymnasium suite (made with
    ``render_mode="rgb_array"`` when ``render``, for replay recording)."""
    if name.startswith("gym:"):
        env_id = name.removeprefix("gym:")

        def make(task: int) -> Any:
            from lmmbench.episodes.envs.gym_adapter import make_gym_env

            del task  # every task index is the same environment; trials differ by seed
            return make_gym_env(env_id, "rgb_array" if render else None)

        close_env(make(0))  # fail fast with a UserError when gymnasium or the id is missing
        return EnvSuite(name, make, None, "random", 500, f"gymnasium {env_id}")
    if is_object_ref(name):
        make_env = make_custom_env(name)
        close_env(make_env(0))  # fail fast: the class must build
        return EnvSuite(name, make_env, None, "random", 500, f"the user's environment {name}")
    return SUITES.get(name)


def make_policy(name: str, settings: PolicySettings) -> Policy:
    """Build the named policy (a registered name, ``ws://HOST:PORT`` for a served one, or ``module:Class`` /
    ``file.py:Class``)."""
    from lmmbench.episodes.policies.remote import RemotePolicy, is_remote

    if is_remote(name):
        return RemotePolicy(name, replan_steps=settings.replan_steps, timeout_s=settings.call_timeout_s)
    if is_object_ref(name):
        return make_custom_policy(name, settings)
    return POLICIES.get(name)(settings)
