"""The user's own environments and policies: ``module:Class`` or ``path/to/file.py:Class`` in ``--env`` / ``--policy``.

An environment class is gymnasium-style (``reset(seed=...)`` -> ``(obs, info)``, ``step(action)`` -> five
values; any ``gymnasium.Env`` is one); it is built as ``Class(task=i)`` when its constructor takes ``task``,
else ``Class()``. A policy class is either a full ``episodes.Policy`` (planning and batched action calls with
per-episode memory), or the short form: ``act(observations) -> actions``, called once per tick with the
observations of every slot that needs an action, in one batch (``BatchedActPolicy`` wraps it). Either is
built as ``Class(action_space=...)`` when its constructor takes ``action_space``, else ``Class()``.

``check_fit`` runs one probe step before any episode: a policy whose action the environment's action space
does not contain, or that cannot read the environment's observations, is one line naming both (exit 2).
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
from lmmbench.episodes.protocols import ActItem, EpisodeKey, EpisodeMemory

__all__ = ["BatchedActPolicy", "check_fit", "is_code_ref", "load_class", "user_env_factory", "user_policy"]


def is_code_ref(ref: str) -> bool:
    """``module:Class`` or ``file.py:Class`` (not ``gym:<id>``)."""
    head, sep, tail = ref.rpartition(":")
    return bool(sep and head and tail.isidentifier() and head != "gym")


def load_class(ref: str, option: str) -> Any:
    """The class named by ``module:Class`` or ``path/to/file.py:Class``; one-line errors."""
    target, _, name = ref.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser().resolve()
            if not path.is_file():
                raise UserError(f"{option} {ref}: no such file {path}")
            mod_name = f"lmmbench_user_{path.stem}_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise UserError(f"{option} {ref}: cannot load {path} as Python")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except UserError:
        raise
    except Exception as exc:  # the user's module raised while importing: name it, keep one line
        raise UserError(f"{option} {ref}: importing {target} failed: {type(exc).__name__}: {exc}") from None
    cls = getattr(module, name, None)
    if cls is None:
        raise UserError(f"{option} {ref}: {target} has no {name}")
    return cls


def _build(cls: Any, **kwargs: Any) -> Any:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    return cls(**{k: v for k, v in kwargs.items() if k in params})


def user_env_factory(ref: str) -> Callable[[int], Any]:
    """``make_env(task)`` for the user's environment class."""
    cls = load_class(ref, "--env")
    return lambda task: _build(cls, task=task)


class BatchedActPolicy:
    """The short policy form (``act(observations) -> actions``, one call per tick) as an ``episodes.Policy``."""

    batched_planning = False

    def __init__(self, inner: Any, name: str, action_space: Any = None) -> None:
        self.inner, self.name, self.action_space = inner, name, action_space

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Memory with the episode's seed."""
        return EpisodeMemory(key=key, seed=seed)

    def dummy_action(self) -> Any:
        """The warm-up action: the policy's ``dummy_action()`` if it has one, else a fixed sample of the space."""
        if hasattr(self.inner, "dummy_action"):
            return self.inner.dummy_action()
        if self.action_space is None:
            raise UserError(f"--policy {self.name}: give it a dummy_action() or use --num-steps-wait 0")
        import copy

        space = copy.deepcopy(self.action_space)
        space.seed(0)
        return space.sample()

    def plan(self, items: Sequence[ActItem]) -> None:
        """Nothing to plan."""
        del items

    def needs_plan(self, item: ActItem) -> bool:
        """Never plans."""
        del item
        return False

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One call of the user's ``act`` for every item; one action each."""
        actions = list(self.inner.act([it.observation for it in items]))
        if len(actions) != len(items):
            raise UserError(f"--policy {self.name}: act() returned {len(actions)} actions for {len(items)} "
                            "observations (one per observation)")
        for it, a in zip(items, actions, strict=True):
            it.memory.trace.append(a)
        return [[a] for a in actions]


def user_policy(ref: str, action_space: Any) -> Any:
    """The user's policy class, built, as an ``episodes.Policy``."""
    cls = load_class(ref, "--policy")
    inner = _build(cls, action_space=action_space)
    if all(hasattr(inner, m) for m in ("new_episode", "plan", "act", "needs_plan", "dummy_action")):
        if not hasattr(inner, "name"):
            inner.name = ref
        return inner
    if not callable(getattr(inner, "act", None)):
        raise UserError(f"--policy {ref}: a policy needs act(observations) -> actions (or the full "
                        "episodes.Policy protocol; docs/episodes.md)")
    return BatchedActPolicy(inner, ref, action_space)


def _mismatch(policy_name: str, env_name: str, what: str) -> UserError:
    return UserError(f"--policy {policy_name} does not fit --env {env_name}: {what}")


def check_fit(policy: Any, env: Any, policy_name: str, env_name: str) -> None:
    """One probe step (reset, plan if asked, one action call, one env step) on a throwaway environment:
    anything that breaks is one line naming the policy and the environment."""
    import numpy as np

    try:
        obs, info = env.reset(seed=0)
    except Exception as exc:
        raise UserError(f"--env {env_name}: reset(seed=0) failed: {type(exc).__name__}: {exc}") from None
    item = ActItem(policy.new_episode(EpisodeKey(0, -1_000), 0), obs, dict(info))
    try:
        if policy.needs_plan(item):
            policy.plan([item])
        action = policy.act([item])[0][0]
    except UserError:
        raise
    except Exception as exc:
        raise _mismatch(policy_name, env_name, f"the policy cannot act on its observations "
                        f"({type(exc).__name__}: {exc})") from None
    space = getattr(env, "action_space", None)
    if space is not None and hasattr(space, "contains"):
        try:
            ok = bool(space.contains(action) or space.contains(np.asarray(action, dtype=space.dtype)))
        except Exception:  # a shape the space cannot even compare
            ok = False
        if not ok:
            shape = getattr(np.asarray(action), "shape", "?")
            raise _mismatch(policy_name, env_name, f"its action (shape {shape}) is not in the environment's "
                            f"action space {space}")
    try:
        env.step(action)
    except Exception as exc:
        raise _mismatch(policy_name, env_name, f"env.step() refused the policy's action "
                        f"({type(exc).__name__}: {exc})") from None
