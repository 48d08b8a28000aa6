"""Policies in the shapes users hold, as episodes policies: what each shape gets batched and what not.

``--policy file.py:Class`` that is not an lmmbench ``Policy`` (no ``act``) is adapted by the methods it has,
checked in this order:

* ``predict_action_chunk(batch)`` (LeRobot): ONE call per tick for every NEED_AE slot, the observations
  stacked on dim 0; it returns ``(B, H, A)`` (a chunk of H actions per slot; ``config.n_action_steps`` of
  them are executed when the policy has one). Mode ``predict_action_chunk``, batched.
* ``select_action(batch)`` only (LeRobot; it keeps one action queue per instance): one instance per running
  episode (at most ``--num-parallel``, built as the first one was), ``reset()`` at the start of every
  episode, one call per slot on a batch of 1, one action out. Mode ``select_action``, batch 1.
* ``infer(obs)`` (openpi): one unbatched observation as the environment gives it, a chunk out (an array
  ``(H, A)`` or a dict with ``"actions"``); one call per slot. Mode ``infer``, batch 1.
* ``forward`` of a ``torch.nn.Module``: ONE forward per tick with every NEED_AE slot's observations stacked
  on dim 0 (a tensor, or for dict observations a dict of stacked tensors, same keys; values that are not
  arrays, such as an instruction, become a list); it returns ``(B, A)`` (one action per slot) or
  ``(B, H, A)`` (a chunk per slot), or a dict with ``"actions"`` of that shape. Mode ``forward``, batched.

``replan_steps`` (openpi's name and meaning): of each chunk only the first ``replan_steps`` actions are executed
before the next action call, and a chunk shorter than that fails the episode's call in one line, as openpi's
evaluation asserts; without it a ``predict_action_chunk`` policy executes ``config.n_action_steps`` actions when
it has that setting, any other chunk whole. ``select_action`` returns one action per call and takes none.

A per-slot adapter sets ``batched_action = False``: the scheduler then makes (and times, and counts) one
action call per slot, so histograms and speed-ups show batch 1 — never a batching lmmbench did not do.
Every adapted policy runs under ``torch.no_grad()`` for torch inputs, has no planning call, appends each
slot's raw chunk to ``memory.trace`` (``--compare-serial`` / ``--reference`` compare them) and steps
``dummy_action()`` when the object has one, else zeros of the environment's action space.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.episodes.protocols import ActItem, ActOnly, EpisodeKey, EpisodeMemory

__all__ = ["MODES", "NEEDED", "AdaptedPolicy", "adapt_policy", "adapter_mode"]

#: adapter mode -> what lmmbench batches for it (written to run.json and the analysis)
MODES = {
    "forward": "one forward per tick, every NEED_AE slot's observation stacked on dim 0",
    "predict_action_chunk": "one predict_action_chunk per tick, every NEED_AE slot's observation stacked on dim 0",
    "select_action": "one select_action per slot (batch 1), one policy instance per running episode, reset() "
                     "per episode",
    "infer": "one infer per slot (batch 1): the policy takes one unbatched observation",
}
#: the one line a policy of no known shape gets
NEEDED = ("a policy needs one of: act(items) (lmmbench.episodes.Policy / SimplePolicy), predict_action_chunk(batch) "
          "or select_action(batch) (LeRobot), infer(obs) (openpi), or forward(batch) on a torch.nn.Module")


def _is_torch_module(obj: Any) -> bool:
    return any(c.__module__ == "torch.nn.modules.module" and c.__name__ == "Module" for c in type(obj).__mro__)


def adapter_mode(obj: Any) -> str | None:
    """Which adapter fits ``obj`` (a ``MODES`` key); None when it is none of the shapes."""
    for method in ("predict_action_chunk", "select_action", "infer"):
        if callable(getattr(obj, method, None)):
            return method
    return "forward" if _is_torch_module(obj) else None


def _to_numpy(value: Any) -> Any:
    """A torch tensor as a float numpy array on the CPU; anything else through ``numpy.asarray``."""
    import numpy as np

    if hasattr(value, "detach"):
        value = value.detach().float().cpu().numpy()
    return np.asarray(value)


_RETURN = ("a policy returns actions: a numeric array or tensor, (A,) or (H, A) per observation ((B, ...) for a "
           "batched call), or a dict with them under 'actions'")


def _actions(out: Any, name: str, call: str) -> Any:
    """What a policy's ``call`` returned, as a numeric array; a ``UserError`` saying what a policy must return."""
    if isinstance(out, dict):
        if "actions" not in out:
            near = " (did you mean 'actions'?)" if "action" in out else ""
            raise UserError(f"--policy {name}: {call} returned a dict with keys {sorted(map(str, out))[:8]} and no "
                            f"'actions'{near}; {_RETURN}")  # fmt: skip
        out = out["actions"]
    if out is None or isinstance(out, (str, bytes)):
        raise UserError(f"--policy {name}: {call} returned {type(out).__name__}; {_RETURN}")
    try:
        arr = _to_numpy(out)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise UserError(f"--policy {name}: {call} returned {type(out).__name__} ({exc}); {_RETURN}") from None
    if arr.dtype.kind not in "biuf" or arr.size == 0:
        raise UserError(f"--policy {name}: {call} returned {arr.dtype} values of shape {arr.shape}; {_RETURN}")
    return arr


def _check_width(chunk: Any, name: str, call: str, space: Any) -> None:
    """No action wider than the environment's action space (it would be cut to it without a word)."""
    shape = getattr(space, "shape", None)
    if shape and chunk.ndim and chunk.shape[-1] > tuple(shape)[-1]:
        raise UserError(f"--policy {name}: {call} returned actions {chunk.shape[-1]} wide; the environment's "
                        f"actions are {tuple(shape)[-1]} wide (its action space {tuple(shape)})")  # fmt: skip


def _stack(observations: Sequence[Any], device: str) -> Any:
    """Observations stacked on dim 0: a tensor, or a dict of stacked tensors (lists for non-array values)."""
    import numpy as np
    import torch

    first = observations[0]
    if isinstance(first, dict):
        return {k: _stack([o[k] for o in observations], device) if _is_array(first[k]) else [o[k] for o in
                observations] for k in first}  # fmt: skip
    arrays = [o.detach().cpu().numpy() if hasattr(o, "detach") else np.asarray(o) for o in observations]
    stacked = torch.as_tensor(np.stack(arrays))
    return (stacked.float() if stacked.dtype == torch.float64 else stacked).to(device)


def _is_array(value: Any) -> bool:
    import numpy as np

    return hasattr(value, "detach") or (isinstance(value, np.ndarray | np.generic | float | int)
                                        and not isinstance(value, bool | str))


class AdaptedPolicy(ActOnly):
    """An episodes ``Policy`` around a user's object of one of the ``MODES`` shapes (see the module docstring)."""

    batched_planning = False

    def __init__(self, obj: Any, mode: str, name: str, device: str = "cpu",
                 build: Callable[[], Any] | None = None, action_space: Any = None,
                 replan_steps: int | None = None) -> None:
        self.obj = obj
        self.mode = mode
        self.name = name
        self.device = device
        self.batched_action = mode in ("forward", "predict_action_chunk")
        self.action_space = action_space
        self._build = build  # select_action: makes one more instance
        self._free: list[Any] = [obj] if mode == "select_action" else []
        self.instances = 1  # select_action: how many were built (one per episode running at once)
        self.replan_steps = replan_steps
        self._executed = replan_steps or (self._n_action_steps(obj) if mode == "predict_action_chunk" else None)
        self.detected_keys: str | None = None  # episodes.keys.detect_policy_keys of its class (custom.py)

    def set_replan_steps(self, replan_steps: int) -> None:
        """Execute the first ``replan_steps`` actions of each chunk (openpi's default for openpi-keyed policies)."""
        if self.mode != "select_action":
            self.replan_steps = self._executed = replan_steps

    @staticmethod
    def _n_action_steps(obj: Any) -> int | None:
        steps = getattr(getattr(obj, "config", None), "n_action_steps", None)
        return int(steps) if isinstance(steps, int) and steps > 0 else None

    def describe(self) -> dict[str, Any]:
        """What run.json and the analysis record: the mode, what is batched, and instances for select_action."""
        return {"mode": self.mode, "batched": self.batched_action, "action_batch": MODES[self.mode],
                "instances": self.instances if self.mode == "select_action" else None,
                "actions_executed_per_chunk": self._executed}

    # -- the episodes Policy protocol ------------------------------------------------------------
    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Memory for one episode; select_action: a free instance (or a new one), ``reset()`` first."""
        import numpy as np

        memory = EpisodeMemory(key=key, seed=seed, generator=np.random.default_rng(seed))
        if self.mode == "select_action":
            instance = self._free.pop() if self._free else self._new_instance()
            reset = getattr(instance, "reset", None)
            if callable(reset):
                reset()
            memory.data["_instance"] = instance
        return memory

    def _new_instance(self) -> Any:
        assert self._build is not None
        self.instances += 1
        return _prepare(self._build(), self.device)

    def end_episode(self, memory: EpisodeMemory) -> None:
        """The episode is over: its select_action instance is free for the next one."""
        instance = memory.data.pop("_instance", None)
        if instance is not None:
            self._free.append(instance)

    def dummy_action(self) -> Any:
        """The object's ``dummy_action()``, else zeros of the environment's action space."""
        own = getattr(self.obj, "dummy_action", None)
        if callable(own):
            return own()
        shape = getattr(self.action_space, "shape", None)
        if shape is None:
            raise ValueError(f"{type(self.obj).__name__} has no dummy_action() and the environment no action_space "
                             "shape: pass --num-steps-wait 0 or define dummy_action()")
        import numpy as np

        return np.zeros(shape, dtype=getattr(self.action_space, "dtype", None) or np.float32)

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One chunk per item: one batched call (forward, predict_action_chunk) or one call per item."""
        import torch

        with torch.no_grad():
            if self.batched_action:
                chunks = self._batched([it.observation for it in items])
            else:
                chunks = [self._single(it) for it in items]
        for it, chunk in zip(items, chunks, strict=True):
            _check_width(chunk, self.name, f"{self.mode}()", self.action_space)
            it.memory.trace.append(chunk)
        return [list(chunk) for chunk in chunks]

    def _batched(self, observations: list[Any]) -> list[Any]:
        batch = _stack(observations, self.device)
        call = self.obj if self.mode == "forward" else self.obj.predict_action_chunk
        out = _actions(call(batch), self.name, f"{self.mode}()")
        if out.ndim == 0 or out.shape[0] != len(observations):
            raise UserError(f"--policy {self.name}: {self.mode}() returned shape {tuple(out.shape)} for a batch "
                            f"of {len(observations)}: dim 0 must be the batch")
        if out.ndim >= 3:  # (B, H, A): a chunk per slot
            return [self._cut(row) for row in out]
        return [self._cut(row[None]) for row in out]  # (B, A) or (B,): one action per slot

    def _cut(self, chunk: Any) -> Any:
        """The actions executed of one chunk: its first ``replan_steps`` (openpi: a shorter chunk is an error), or
        LeRobot's ``n_action_steps``, or all of it."""
        if self.replan_steps is not None and len(chunk) < self.replan_steps:
            raise ValueError(f"--replan-steps {self.replan_steps}: the policy predicts only {len(chunk)} actions per "
                             "chunk (openpi's evaluation asserts the same); lower --replan-steps")
        return chunk[: self._executed] if self._executed else chunk

    def _single(self, item: ActItem) -> Any:
        if self.mode == "infer":
            out = _actions(self.obj.infer(item.observation), self.name, "infer()")
            if out.ndim > 2:
                raise UserError(f"--policy {self.name}: infer() returned shape {out.shape} for one observation; "
                                f"{_RETURN}")  # fmt: skip
            return self._cut(out if out.ndim >= 2 else out[None])
        instance = item.memory.data["_instance"]
        action = _actions(instance.select_action(_stack([item.observation], self.device)), self.name,
                          "select_action()")  # fmt: skip
        return action if action.ndim >= 2 else action[None]  # (1, A): one action


def adapt_policy(obj: Any, ref: str, device: str, build: Callable[[], Any],
                 action_space: Any = None, replan_steps: int | None = None) -> AdaptedPolicy:
    """``obj`` (built from ``--policy ref``) as an episodes policy; a ``UserError`` naming the methods a policy
    needs when it has none of the shapes."""
    mode = adapter_mode(obj)
    if mode is None:
        raise UserError(f"--policy {ref}: {type(obj).__name__} has none of the methods lmmbench drives; {NEEDED}")
    if replan_steps is not None and mode == "select_action":
        raise UserError(f"--replan-steps {replan_steps}: --policy {ref} has only select_action, which returns one "
                        "action per call (its own n_action_steps decides its queue); remove --replan-steps")
    return AdaptedPolicy(_prepare(obj, device), mode, ref, device, build, action_space, replan_steps)


def _prepare(obj: Any, device: str) -> Any:
    """A ``torch.nn.Module`` in eval mode on ``device``; anything else as it is."""
    if _is_torch_module(obj):
        if any(getattr(p, "is_meta", False) for p in obj.parameters()):
            raise UserError(f"{type(obj).__name__}: its parameters are on the meta device (built without weights); "
                            "load its weights (e.g. to_empty() then load_state_dict()) before lmmbench drives it")
        obj.eval()
        obj.to(device)
    return obj
