"""openpi's LIBERO evaluation settings (``examples/libero/main.py``'s ``Args``) as ``run episodic-eval`` takes them,
by openpi's names and meanings, and the checks that refuse what a suite cannot honour.

* ``task_suite_name`` (``libero_spatial``, ``libero_object``, ``libero_goal``, ``libero_10``, ``libero_90``): the
  suite, the same as ``--env libero-spatial`` etc.
* ``num_steps_wait`` (10), ``num_trials_per_task`` (50): as lmmbench's options of the same names; trial ``i`` of a
  task starts from LIBERO's initial state ``i`` and more trials than the task has states are refused.
* ``replan_steps`` (openpi: 5): the first ``replan_steps`` actions of each chunk are executed before the next
  call; openpi-keyed policies default to 5, others to their own chunk (``episodes.policies.adapters``).
* ``resize_size`` (224): both cameras resized with padding (``episodes.envs.images.resize_with_pad``).
* ``seed`` (openpi: 7): LIBERO's ``env.seed(seed)``, once when a task's environment is made; lmmbench's own
  per-episode seeds (the policy's noise, the resets of other suites) come from ``--episode-seed``.
* ``video_out_path``: each episode's frames as an MP4 in that folder (``--record-replay`` there).
"""

from __future__ import annotations

from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.episodes.envs.libero_suites import LIBERO_SUITES

__all__ = ["OPENPI_LIBERO_SEED", "OPENPI_REPLAN_STEPS", "check_chunk_options", "check_trials", "env_from_task_suite",
           "env_settings", "resolve_policy_keys", "seeds"]

OPENPI_LIBERO_SEED = 7  # examples/libero/main.py: Args.seed
OPENPI_REPLAN_STEPS = 5  # examples/libero/main.py: Args.replan_steps
_BY_OPENPI_NAME = {bench: name for name, (bench, _, _) in LIBERO_SUITES.items()}


def env_from_task_suite(task_suite_name: str | None, env: str, env_given: bool) -> str:
    """The ``--env`` that openpi's ``task_suite_name`` names (``libero_object`` -> ``libero-object``); ``env`` when
    it is not given; a conflict with an ``--env`` given beside it is refused."""
    if task_suite_name is None:
        return env
    name = _BY_OPENPI_NAME.get(task_suite_name)
    if name is None:
        raise UserError(f"--task-suite-name {task_suite_name}: not a LIBERO suite; one of "
                        f"{', '.join(_BY_OPENPI_NAME)}")
    if env_given and env != name:
        raise UserError(f"--task-suite-name {task_suite_name} is --env {name}, but --env {env} was given too; "
                        "give one of them")
    return name


def seeds(seed: int, seed_given: bool, episode_seed: int | None, libero: bool) -> tuple[int | None, int]:
    """(the environment's seed, the base of the per-episode seeds): LIBERO's ``env.seed`` is ``--seed`` (openpi's
    7 when not given), other suites have none; per-episode seeds come from ``--episode-seed``, else ``--seed``."""
    env_seed = (seed if seed_given else OPENPI_LIBERO_SEED) if libero else None
    return env_seed, seed if episode_seed is None else episode_seed


def env_settings(suite: Any, resize_size: int | None, env_seed: int | None) -> dict[str, Any]:
    """The keywords ``suite.make_env`` takes for these settings; a setting the suite cannot honour is refused."""
    out: dict[str, Any] = {}
    for name, option, value in (("resize_size", "--resize-size", resize_size), ("env_seed", "--seed", env_seed)):
        if value is None:
            continue
        if name not in suite.settings:
            raise UserError(f"{option} {value}: --env {suite.name} does not take it (openpi's LIBERO setting: "
                            "the libero-* suites); remove it")
        out[name] = value
    return out


def check_trials(probe_env: Any, env: str, trials: int) -> None:
    """More trials per task than the environment has initial states (LIBERO: 50 per task) is refused."""
    states = getattr(probe_env, "init_states", None)
    if states is not None and trials > len(states):
        raise UserError(f"--num-trials-per-task {trials}: --env {env} has {len(states)} initial states per task, "
                        f"and trial i starts from initial state i (as openpi's evaluation); give at most {len(states)}")


def check_chunk_options(policy_name: str, adapted: bool, execute_steps_given: bool, replan_steps: int | None) -> None:
    """``--execute-steps`` is the toy policies' (an adapted policy takes openpi's ``--replan-steps``);
    ``--replan-steps`` applies to adapted policies only (the pi0 policies refuse both)."""
    if adapted and execute_steps_given:
        raise UserError(f"--execute-steps: --policy {policy_name} is your class, driven by its own chunks; give "
                        "--replan-steps N (openpi's name: the first N actions of each chunk are executed)")
    if not adapted and replan_steps is not None:
        raise UserError(f"--replan-steps {replan_steps}: --policy {policy_name} is lmmbench's; it applies to your "
                        "policy class (LeRobot-, openpi-style, a torch module); the toy policies take --execute-steps")


def resolve_policy_keys(policy: Any, policy_name: str, given: str | None, probe_env: Any, env: str) -> str:
    """The convention the policy is driven in: ``--policy-keys``, else the one its class says
    (``episodes.keys.detect_policy_keys``), else ``native``; lerobot / openpi need an adapted policy and an
    environment that declares its keys (``key_map``: pusht, libero-*)."""
    from lmmbench.episodes.policies.adapters import AdaptedPolicy
    from lmmbench.episodes.policies.remote import RemotePolicy

    if isinstance(policy, RemotePolicy):  # a served policy gets openpi's keys (observation/<name>, prompt)
        if given not in (None, "openpi"):
            raise UserError(f"--policy-keys {given}: --policy {policy_name} is served over openpi's protocol, which "
                            "sends openpi's keys; remove --policy-keys")
        return "openpi"
    adapted = isinstance(policy, AdaptedPolicy)
    keys = given or (policy.detected_keys if adapted else None) or "native"
    if keys == "native":
        return keys
    if not adapted:
        raise UserError(f"--policy-keys {keys}: --policy {policy_name} is lmmbench's, with its own keys; it applies to "
                        "your policy class (module:Class or file.py:Class); remove --policy-keys")
    if getattr(probe_env, "key_map", None) is None:
        raise UserError(f"--policy-keys {keys}: --env {env} has no {keys} keys; the suites with LeRobot's and openpi's "
                        "keys are pusht and libero-*; give --policy-keys native")
    return keys
