"""The user's own policy and environment: ``module:Class`` or ``path/to/file.py:Class``.

``--policy`` / ``--env`` take, besides a registered name or ``gym:<id>``, a class (or factory) named
as ``package.module:Name`` (imported) or ``path/to/file.py:Name`` (loaded from the file). A LeRobot policy class
(``episodes.keys.detect_policy_keys``) is called with its own config, ``config_class()``, or with nothing when it
has none; any other policy class with the run's ``PolicySettings`` when its own ``__init__`` has a required
positional parameter (or one named ``settings``), else with none (``torch.nn.Module``'s ``*args`` do not count); an
environment class with the task index likewise (or one named ``task``). A policy without ``act`` is
adapted by its shape (``episodes.policies.adapters``: a torch module, LeRobot-style, openpi-style). A
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
from lmmbench.episodes.protocols import ActItem, ActOnly, Env, EpisodeKey, EpisodeMemory, Policy

__all__ = ["SimplePolicy", "UserCodeError", "check_fit", "close_env", "is_object_ref", "load_object", "make_custom_env",
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
    except (Exception, SystemExit) as exc:  # the user's module failed to import (or exited): one line, exit 2
        raise UserError(f"{option} {ref}: importing {where} failed ({_describe(exc)}); the error is in your "
                        "module") from None  # fmt: skip
    if not hasattr(module, attr):
        raise UserError(f"{option} {ref}: {where} has no {attr!r}")
    found = getattr(module, attr)
    if inspect.isbuiltin(found) or not callable(found):
        what = "a built-in function" if callable(found) else f"a {type(found).__name__}"
        raise UserError(f"{option} {ref}: {attr} is {what}, not a class or factory written in Python; name your "
                        "policy / environment class")  # fmt: skip
    return found


class UserCodeError(UserError):
    """An exception the user's policy or environment raised in one of its methods (exit 2, one line)."""

    def __init__(self, option: str, ref: str, what: str) -> None:
        self.what = what
        super().__init__(f"{option} {ref}: {what}; the error is in your code")


def _describe(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception the user's code raised."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _build(factory: Any, args: tuple[Any, ...], option: str, ref: str) -> Any:
    """``factory(*args)``; an exception (or ``sys.exit``) in the user's constructor is one ``UserError`` line."""
    try:
        return factory(*args)
    except UserError:
        raise
    except (Exception, SystemExit) as exc:
        name = getattr(factory, "__qualname__", ref)
        raise UserError(f"{option} {ref}: {name}() raised {_describe(exc)}; the error is in your code") from None


def _guard(obj: Any, methods: Sequence[str], option: str, ref: str) -> Any:
    """``obj`` with each of ``methods`` wrapped so that an exception (or ``sys.exit``) it raises becomes one
    ``UserError`` line naming the option, the class and the method (lmmbench's crash handling stays for
    lmmbench's own bugs). Set on the instance, so ``type(obj)`` is unchanged; an object that takes no new
    attributes is returned as it is."""
    cls = type(obj).__name__
    for name in methods:
        method = getattr(obj, name, None)
        if not callable(method) or getattr(method, "_lmmbench_guarded", False):
            continue

        def guarded(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            try:
                return _m(*args, **kwargs)
            except UserError:
                raise
            except (Exception, SystemExit) as exc:
                raise UserCodeError(option, ref, f"{cls}.{_n}() raised {_describe(exc)}") from None

        guarded._lmmbench_guarded = True  # type: ignore[attr-defined]
        try:
            setattr(obj, name, guarded)
        except (AttributeError, TypeError):
            return obj
    return obj


def _own_init(cls: type) -> Any:
    """The ``__init__`` a class really runs: the first one defined along its MRO; None when that is
    ``object``'s or torch's (``nn.Module.__init__(*args, **kwargs)`` takes no settings of ours)."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            if klass is object or klass.__module__.split(".")[0] == "torch":
                return None
            return vars(klass)["__init__"]
    return None


def _takes_argument(factory: Any, name: str) -> bool:
    """Whether ``factory`` is to be called with one argument (the settings / the task index): its own
    ``__init__`` (a class) or its signature (a function) has a required positional parameter, or one
    called ``name``. Defaults, ``*args`` and torch's ``nn.Module.__init__`` do not count."""
    target = _own_init(factory) if inspect.isclass(factory) else factory
    if target is None:
        return False
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return False
    if inspect.isclass(factory) and params:
        params = params[1:]  # self
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.default is p.empty or p.name == name for p in positional[:1])


def _is_gymnasium_env(obj: Any) -> bool:
    return any(c.__module__.split(".")[0] == "gymnasium" for c in type(obj).__mro__)


def make_custom_env(ref: str) -> Callable[[int], Env]:
    """``make_env(task)`` for the class ``ref`` names (called with the task index when it takes one)."""
    factory = load_object(ref, "--env")
    with_task = _takes_argument(factory, "task")

    def make(task: int) -> Env:
        env = _build(factory, (task,) if with_task else (), "--env", ref)
        if _is_gymnasium_env(env):
            from lmmbench.episodes.envs.gym_adapter import GymEnvAdapter

            _guard(env, _ENV_API, "--env", ref)
            return GymEnvAdapter(env)
        if not (callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))):
            raise UserError(f"--env {ref}: {type(env).__name__} has no reset(seed) / step(action)")
        return _guard(env, _ENV_API, "--env", ref)  # type: ignore[no-any-return]

    return make


_POLICY_API = ("new_episode", "dummy_action", "plan", "act", "needs_plan")
_ENV_API = ("reset", "step", "render", "close")


_ADAPTED_API = ("forward", "predict_action_chunk", "select_action", "infer", "reset", "dummy_action")


def _constructor_args(factory: Any, settings: Any, ref: str) -> tuple[Any, ...]:
    """What the policy class is called with: a LeRobot policy its own ``config_class()`` (or nothing), any other
    the run's ``PolicySettings`` when it takes them."""
    from lmmbench.episodes.keys import detect_policy_keys

    if detect_policy_keys(factory) == "lerobot":
        config_class = getattr(factory, "config_class", None)
        return (_build(config_class, (), "--policy", ref),) if callable(config_class) else ()
    return (settings,) if _takes_argument(factory, "settings") else ()


def make_custom_policy(ref: str, settings: Any) -> Policy:
    """The policy ``ref`` names, built with ``settings`` when its constructor takes them (``_takes_argument``).
    An lmmbench ``Policy`` (it has ``act``) runs as it is; a torch module, a LeRobot-style or an openpi-style
    policy through ``episodes.policies.adapters``; anything else is one line naming the methods a policy needs."""
    factory = load_object(ref, "--policy")
    args = _constructor_args(factory, settings, ref)

    def build() -> Any:
        return _guard(_build(factory, args, "--policy", ref), _ADAPTED_API, "--policy", ref)

    policy = _build(factory, args, "--policy", ref)
    if not callable(getattr(policy, "act", None)):
        from lmmbench.episodes.keys import detect_policy_keys
        from lmmbench.episodes.policies.adapters import adapt_policy

        space = getattr(getattr(settings, "probe_env", None), "action_space", None)
        adapted = adapt_policy(_guard(policy, _ADAPTED_API, "--policy", ref), ref, getattr(settings, "device", "cpu"),
                               build, space, getattr(settings, "replan_steps", None))
        adapted.detected_keys = detect_policy_keys(factory)
        return adapted
    missing = [m for m in _POLICY_API if not callable(getattr(policy, m, None))]
    if missing:
        raise UserError(f"--policy {ref}: {type(policy).__name__} lacks {', '.join(missing)} (see "
                        "lmmbench.episodes.Policy, or subclass lmmbench.episodes.SimplePolicy)")
    if not getattr(policy, "name", None):
        policy.name = ref
    if not hasattr(policy, "batched_planning"):
        policy.batched_planning = False
    return _guard(policy, _POLICY_API, "--policy", ref)  # type: ignore[no-any-return]


class SimplePolicy(ActOnly):
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

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One chunk of actions per item, from one batched call."""
        raise NotImplementedError


def check_fit(policy: Policy, env: Env, policy_name: str, env_name: str, num_steps_wait: int,
              warmup_action: Any = None) -> None:
    """One probe episode step (warm-up, plan, act, step) of ``policy`` in ``env``; any failure is one
    ``UserError`` line naming both. ``warmup_action``: the environment's own (LIBERO's), else the policy's."""
    space = getattr(env, "action_space", None)
    memory: EpisodeMemory | None = None
    try:
        obs, info = env.reset(seed=0)
        memory = policy.new_episode(EpisodeKey(0, -1), 0)
        if num_steps_wait and warmup_action is not None:
            obs, _, _, _, info = env.step(warmup_action)
        elif num_steps_wait:
            dummy = policy.dummy_action()
            _check_action(space, dummy, "its warm-up action")
            obs, _, _, _, info = env.step(dummy)
        item = ActItem(memory, obs, info)
        policy.plan([item])
        chunks = policy.act([item])
        if len(chunks) == 1 and isinstance(chunks[0], BaseException):  # a request that failed (a served policy)
            raise chunks[0]
        if len(chunks) != 1 or not chunks[0]:
            raise ValueError("act() must return one non-empty chunk per item")
        _check_action(space, chunks[0][0], "its action")
        env.step(chunks[0][0])
    except UserCodeError as exc:
        raise UserError(f"--policy {policy_name} does not fit --env {env_name}: a probe step failed "
                        f"({exc.what}); pick a policy made for this environment") from None  # fmt: skip
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"--policy {policy_name} does not fit --env {env_name}: a probe step failed "
                        f"({_describe(exc)}); pick a policy made for this environment") from None
    finally:
        end = getattr(policy, "end_episode", None)
        if callable(end) and memory is not None:
            end(memory)
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
