"""The user's own policy and environment: ``module:Class`` or ``path/to/file.py:Class``.

``--policy`` / ``--env`` take, besides a registered name or ``gym:<id>``, a class (or factory) named
as ``package.module:Name`` (imported) or ``path/to/file.py:Name`` (loaded from the file). A policy
class is called with the run's ``PolicySettings`` when it takes an argument, else with none; an
environment class with the task index when it takes an argument, else with none. A
``gymnasium.Env`` instance is wrapped in ``GymEnvAdapter``. ``SimplePolicy`` is a base class for a
policy that only acts (no planning call). ``check_fit`` runs one probe step of the policy in the
environment, so a policy and an environment that do not fit fail in one line before the run.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.episodes.protocols import ActItem, Env, EpisodeKey, EpisodeMemory, Policy

__all__ = ["SimplePolicy", "check_fit", "close_env", "is_object_ref", "load_object", "make_custom_env",
           "make_custom_policy"]


def is_object_ref(name: str) -> bool:
    """Whether ``name`` names a class as ``module:Name`` or ``file.py:Name`` (not ``gym:<id>``)."""
    return ":" in name and not name.startswith("gym:")


def load_object(ref: str, option: str) -> Any:
    """The object ``ref`` names (``package.module:Name`` or ``path/to/file.py:Name``); a ``UserError``
    naming ``option`` when the module, file or name is missing or the module fails to import."""
    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise UserError(f"{option} {ref}: give module:Class or path/to/file.py:Class")
    try:
        if where.endswith(".py") or "/" in where:
            path = Path(where)
            if not path.is_file():
                raise UserError(f"{option} {ref}: no such file {path}")
            mod_name = f"lmmbench_user_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except UserError:
        raise
    except Exception as exc:  # the user's module failed to import: say which and why, in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise UserError(f"{option} {ref}: importing {where} failed ({type(exc).__name__}: {first})") from None
    if not hasattr(module, attr):
        raise UserError(f"{option} {ref}: {where} has no {attr!r}")
    return getattr(module, attr)


def _takes_argument(factory: Any) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def _is_gymnasium_env(obj: Any) -> bool:
    return any(c.__module__.split(".")[0] == "gymnasium" for c in type(obj).__mro__)


def make_custom_env(ref: str) -> Callable[[int], Env]:
    """``make_env(task)`` for the class ``ref`` names (called with the task index when it takes one)."""
    factory = load_object(ref, "--env")
    with_task = _takes_argument(factory)

    def make(task: int) -> Env:
        env = factory(task) if with_task else factory()
        if _is_gymnasium_env(env):
            from lmmbench.episodes.gym_adapter import GymEnvAdapter

            return GymEnvAdapter(env)
        if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
            raise UserError(f"--env {ref}: {type(env).__name__} has no reset(seed) / step(action)")
        return env  # type: ignore[no-any-return]

    return make


_POLICY_API = ("new_episode", "dummy_action", "plan", "act", "needs_plan")


def make_custom_policy(ref: str, settings: Any) -> Policy:
    """The policy ``ref`` names, built with ``settings`` when its constructor takes an argument."""
    factory = load_object(ref, "--policy")
    policy = factory(settings) if _takes_argument(factory) else factory()
    missing = [m for m in _POLICY_API if not callable(getattr(policy, m, None))]
    if missing:
        raise UserError(f"--policy {ref}: {type(policy).__name__} lacks {', '.join(missing)} (see "
                        "lmmbench.episodes.Policy, or subclass lmmbench.episodes.SimplePolicy)")
    if not getattr(policy, "name", None):
        policy.name = ref
    if not hasattr(policy, "batched_planning"):
        policy.batched_planning = False
    return policy  # type: ignore[no-any-return]


class SimplePolicy:
    """Base class of a policy that only acts: override ``act`` (and ``dummy_action`` for warm-up steps).

    Each episode's memory has a ``numpy.random.Generator`` seeded with the episode's seed
    (``memory.generator``); there is no planning call, and every chunk holds the actions ``act``
    returns for its item.
    """

    name = ""
    batched_planning = False

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Memory with a numpy generator of this episode only."""
        import numpy as np

        return EpisodeMemory(key=key, seed=seed, generator=np.random.default_rng(seed))

    def dummy_action(self) -> Any:
        """The warm-up action (``--num-steps-wait``); override it when the environment needs one."""
        raise NotImplementedError(f"{type(self).__name__} has no dummy_action(): pass --num-steps-wait 0 or "
                                  "define one")

    def plan(self, items: Sequence[ActItem]) -> None:
        """No planning."""
        del items

    def needs_plan(self, item: ActItem) -> bool:
        """Never plans."""
        del item
        return False

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One chunk of actions per item, from one batched call."""
        raise NotImplementedError


def check_fit(policy: Policy, env: Env, policy_name: str, env_name: str, num_steps_wait: int) -> None:
    """One probe episode step (warm-up, plan, act, step) of ``policy`` in ``env``; any failure is one
    ``UserError`` line naming both."""
    space = getattr(env, "action_space", None)
    try:
        obs, info = env.reset(seed=0)
        memory = policy.new_episode(EpisodeKey(0, -1), 0)
        if num_steps_wait:
            dummy = policy.dummy_action()
            _check_action(space, dummy, "its warm-up action")
            obs, _, _, _, info = env.step(dummy)
        item = ActItem(memory, obs, info)
        policy.plan([item])
        chunks = policy.act([item])
        if len(chunks) != 1 or not chunks[0]:
            raise ValueError("act() must return one non-empty chunk per item")
        _check_action(space, chunks[0][0], "its action")
        env.step(chunks[0][0])
    except UserError:
        raise
    except Exception as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise UserError(f"--policy {policy_name} does not fit --env {env_name}: a probe step failed "
                        f"({type(exc).__name__}: {text}); pick a policy made for this environment") from None
    finally:
        close_env(env)


def _check_action(space: Any, action: Any, what: str) -> None:
    if space is None or not callable(getattr(space, "contains", None)):
        return
    try:
        ok = bool(space.contains(action))
    except Exception:  # a shape or type the space cannot even compare
        ok = False
    if not ok:
        raise ValueError(f"{what} {_short(action)} is not in the action space {space}")


def _short(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def close_env(env: Any) -> None:
    """``env.close()`` when the environment has one."""
    close = getattr(env, "close", None)
    if callable(close):
        close()
