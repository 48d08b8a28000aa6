"""How ``episodic-eval`` builds a run from its options: the device, the suite and its environments' settings
(openpi's names resolved), the policy with its dtype, CUDA-graph mode and keys, and ``EnvMaker``, the picklable
environment factory that spawned ``--env-workers`` use. The spec itself (``specs.episodic_eval``) schedules and
reports; ``lmmbench serve-policy`` shares ``resolve_device``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lmmbench.specs.episodic_eval import EpisodicEvalOptions

__all__ = ["EnvMaker", "build_run", "resolve_device", "suite_and_env"]


def resolve_device(name: str) -> str:
    """``--device`` resolved; CUDA asked for on a machine without it is refused in one line."""
    import torch

    from lmmbench.core.errors import UserError

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {name}: CUDA is not available on this machine; use --device cpu or auto")
    return name


def _policy_dtype_and_graphs(opts: EpisodicEvalOptions, policy: str, device: str, vla: bool) -> tuple[str, str]:
    """(dtype, CUDA-graph mode) of the policy: ``--dtype`` auto is bfloat16 on CUDA, float32 elsewhere; both
    options act on the pi0 policies only and are refused, by name, for any other policy."""
    from lmmbench.core.errors import UserError
    from lmmbench.models.vla_graphs import resolve_graph_mode

    if not vla and opts.dtype != "auto":
        raise UserError(f"--dtype {opts.dtype}: --policy {policy} runs in its own dtype; --dtype applies to the "
                        "pi0 policies; remove it")
    if not vla and opts.cuda_graphs != "off":
        raise UserError(f"--cuda-graphs {opts.cuda_graphs}: --policy {policy} has no action-expert call to capture;"
                        " it applies to the pi0 policies; remove it")
    import torch

    try:
        resolve_graph_mode(opts.cuda_graphs, torch.device(device))
    except ValueError as exc:
        raise UserError(f"--cuda-graphs {opts.cuda_graphs}: {exc}") from None
    dtype = opts.dtype if opts.dtype != "auto" else "bfloat16" if device.startswith("cuda") else "float32"
    return dtype, opts.cuda_graphs


def suite_and_env(opts: EpisodicEvalOptions) -> tuple[Any, int, dict[str, Any], dict[str, Any]]:
    """The suite (openpi's ``task_suite_name`` or ``--env``), its task count, the settings its environments are
    made with, and what run.json records of them."""
    from lmmbench.config.limits import check_limit
    from lmmbench.core.errors import UserError
    from lmmbench.episodes import resolve_suite
    from lmmbench.episodes.openpi_settings import env_from_task_suite, env_settings, seeds

    env = env_from_task_suite(opts.task_suite_name, opts.env, "env" in opts.model_fields_set)
    suite = resolve_suite(env, render=opts.record_replay or opts.video_out_path is not None)
    num_tasks = opts.num_tasks or suite.num_tasks or 8
    if suite.num_tasks is not None and num_tasks > suite.num_tasks:
        raise UserError(f"--num-tasks {num_tasks}: {suite.name} has {suite.num_tasks} tasks")
    check_limit("episodes", num_tasks * opts.num_trials_per_task, "--num-tasks x --num-trials-per-task")
    env_seed, episode_seed = seeds(opts.seed, "seed" in opts.model_fields_set, opts.episode_seed,
                                   "env_seed" in suite.settings)
    kwargs = env_settings(suite, opts.resize_size, env_seed)
    info = {"env": env, "env_seed": env_seed, "episode_seed": episode_seed,
            "resize_size": kwargs.get("resize_size", 224 if "resize_size" in suite.settings else None),
            "task_suite_name": opts.task_suite_name}
    return suite, num_tasks, kwargs, info


@dataclasses.dataclass(frozen=True)
class EnvMaker:
    """``make_env(task)`` with the run's environment settings and policy keys: a module-level object rather than
    a closure, so that spawned ``--env-workers`` (LIBERO) can pickle it and build their scenes themselves."""

    make: Callable[..., Any]
    kwargs: dict[str, Any]
    keys: str

    def __call__(self, task: int) -> Any:
        from lmmbench.episodes.keys import KeyedEnv

        env = self.make(task, **self.kwargs)
        return env if self.keys == "native" else KeyedEnv(env, self.keys)


def build_run(opts: EpisodicEvalOptions) -> tuple[Any, int, Any, Any, dict[str, Any]]:
    """(suite, number of tasks, make_env(task), the policy, what run.json records): openpi's settings resolved,
    the policy built with the run's settings and its keys chosen (``episodes.keys``)."""
    from lmmbench.config.input_files import prepare_out_dir
    from lmmbench.core.errors import UserError
    from lmmbench.episodes import PolicySettings, make_policy
    from lmmbench.episodes.custom import close_env
    from lmmbench.episodes.openpi_settings import (
        OPENPI_REPLAN_STEPS,
        check_chunk_options,
        check_trials,
        resolve_policy_keys,
    )
    from lmmbench.episodes.policies.adapters import AdaptedPolicy
    from lmmbench.episodes.suites import VLA_POLICIES

    if opts.video_out_path is not None:  # a file in the way is refused now, not when the first episode ends
        prepare_out_dir(Path(opts.video_out_path), "--video-out-path")

    suite, num_tasks, kwargs, info = suite_and_env(opts)
    device = resolve_device(opts.device)
    policy_name = opts.policy or suite.default_policy
    if opts.revision is not None and policy_name != "chat":
        raise UserError(f"--revision {opts.revision}: --policy {policy_name} loads no model from a hub; it applies to "
                        "--policy chat's --model; remove it")
    dtype, graphs = _policy_dtype_and_graphs(opts, policy_name, device, policy_name in VLA_POLICIES)
    probe = suite.make_env(0, **kwargs)
    try:
        check_trials(probe, info["env"], opts.num_trials_per_task)
        _check_vla_options(opts, policy_name)
        settings = PolicySettings(device=device, weight_seed=opts.seed, execute_steps=opts.execute_steps,
                                  batched_planning=opts.batched_planning, model=opts.model, probe_env=probe,
                                  dtype=dtype, cuda_graphs=graphs,
                                  control_period_s=float(getattr(probe, "control_period_s", 0.1)),
                                  replan_steps=opts.replan_steps, call_timeout_s=opts.call_timeout_s or 60.0)
        try:
            policy = make_policy(policy_name, settings)
        except ValueError as exc:
            raise UserError(f"--policy {policy_name}: {exc}") from None
        from lmmbench.episodes.policies.remote import RemotePolicy

        remote = isinstance(policy, RemotePolicy)
        if opts.call_timeout_s is not None and not remote:
            raise UserError(f"--call-timeout-s {opts.call_timeout_s:g}: --policy {policy_name} is not served; it "
                            "applies to --policy ws://HOST:PORT; remove it")
        if isinstance(policy, RemotePolicy):
            policy.check_reachable()
        adapted = isinstance(policy, AdaptedPolicy) or remote
        check_chunk_options(policy_name, adapted, "execute_steps" in opts.model_fields_set, opts.replan_steps)
        keys = resolve_policy_keys(policy, policy_name, opts.policy_keys, probe,
                                   info["env"])
        if keys != "native" and not remote:
            assert isinstance(policy, AdaptedPolicy)  # resolve_policy_keys refuses the others
            policy.action_space = getattr(probe, "raw_action_space", None)
            if keys == "openpi" and opts.replan_steps is None:
                policy.set_replan_steps(OPENPI_REPLAN_STEPS)
    finally:
        close_env(probe)

    make_env = EnvMaker(suite.make_env, kwargs, "native" if remote else keys)

    info.update(policy_name=policy_name, device=device, policy_keys=keys,
                dtype=dtype if policy_name in VLA_POLICIES else None,
                control_period_s=settings.control_period_s, replan_steps=getattr(policy, "replan_steps", None))
    return suite, num_tasks, make_env, policy, info


def _check_vla_options(opts: EpisodicEvalOptions, policy_name: str) -> None:
    from lmmbench.core.errors import UserError
    from lmmbench.episodes.suites import VLA_POLICIES

    if opts.batched_planning and policy_name not in VLA_POLICIES:
        raise UserError(f"--batched-planning: --policy {policy_name} has no VLM planner to batch; it applies to "
                        f"{', '.join(VLA_POLICIES)}")
    if policy_name in VLA_POLICIES and "execute_steps" in opts.model_fields_set:
        raise UserError(f"--execute-steps: --policy {policy_name} executes each action chunk for its waypoint "
                        "pair's duration (the episodic design); remove --execute-steps")
