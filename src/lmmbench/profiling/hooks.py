"""Stage hooks: forward hooks on the stage modules and timed wrappers around generate()'s helpers.

``StageHooks(model, family)`` finds the stage modules (``families.resolve_modules``), adds
forward pre/post hooks on them and wraps, *on the model instance only*, the helper methods
``generate()`` calls around the forward (generation config, input preparation, position / rope
index, multimodal encoders run before the first forward, cache creation, logits processors and
stopping criteria). Each hook opens / closes a span on the active ``Timeline``; with no active
timeline a hook does nothing.

Hooks never change outputs: wrappers call the original with the same arguments and return its
result untouched. Hooks never crash a run: an exception inside a hook's own code is logged, the
hook is dropped for the rest of the run (``dropped`` keeps its error), and the model call goes
on; ``dropped_categories()`` tells which stages are no longer measured.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any

from lmmbench.profiling.families import ResolvedModules, resolve_modules
from lmmbench.profiling.study_timer import StudyPrefillTimer
from lmmbench.profiling.timeline import Timeline

__all__ = ["GENERATE_METHOD_CATEGORIES", "POSITION_METHODS", "StageHooks"]

log = logging.getLogger(__name__)

# generate() helpers (transformers 4.x and 5.x names; missing ones are skipped) -> span category
GENERATE_METHOD_CATEGORIES: dict[str, str] = {
    "_extract_generation_mode_kwargs": "generate_setup",
    "_prepare_generation_config": "generate_setup",
    "_get_deprecated_gen_repo": "generate_setup",
    "_validate_model_kwargs": "generate_setup",
    "_validate_generation_mode": "generate_setup",
    "_prepare_special_tokens": "generate_setup",
    "_prepare_generated_length": "generate_setup",
    "_validate_generated_length": "generate_setup",
    "_supports_logits_to_keep": "generate_setup",
    "_get_logits_processor": "generate_setup",
    "_get_stopping_criteria": "generate_setup",
    "_valid_auto_compile_criteria": "generate_setup",
    "_prepare_model_inputs": "input_prep",
    "_prepare_attention_mask_for_generation": "input_prep",
    "_expand_inputs_for_generation": "input_prep",
    "prepare_inputs_for_generation": "input_prep",
    "_prefill": "input_prep",  # its own code slices the prompt; the forward inside is a child span
    "_prepare_position_ids_for_generation": "position_ids",
    "get_rope_index": "position_ids",
    "_maybe_prepare_encoder_kwargs_for_generation": "encoder_dispatch",
    "_prepare_cache_for_generation": "cache_setup",
}
# position-id helpers that also run on the multimodal wrapper (inside the forward)
POSITION_METHODS = ("get_rope_index", "compute_3d_position_ids")

FORWARD = "forward"
FIRST_TOKEN = "first_token"
GENERATE = "generate"


class StageHooks:
    """Stage hooks on one model: ``install()`` (or ``with StageHooks(model) as hooks:``), then
    ``activate(timeline)`` / ``deactivate()`` around each measurement; ``remove()`` restores the model."""

    def __init__(self, model: Any, family: str | None = None) -> None:
        self.modules: ResolvedModules = resolve_modules(model, family)
        self.timeline: Timeline | None = None
        self.errors: list[str] = []
        self.dropped: dict[str, str] = {}  # hook name -> its error, for the rest of the run
        self._handles: dict[str, list[Any]] = {}
        self._wrapped: list[tuple[Any, str]] = []
        self._open: dict[str, list[int]] = {}
        self._dropped_methods: set[str] = set()
        self._forward_done = False
        self._installed = False
        # prefill timed the TTFT study's way (first forward minus the encoders inside it), its own marks
        self.study = StudyPrefillTimer(self.modules.generation_model, [self.modules.visual, self.modules.audio])

    # -- installing -----------------------------------------------------------------------
    def install(self) -> StageHooks:
        """Add every hook (idempotent)."""
        if self._installed:
            return self
        m = self.modules
        self._hook_module("forward", m.generation_model, top=True)
        for role in ("wrapper", "visual", "audio", "llm", "lm_head"):
            module = getattr(m, role)
            if module is not None and module is not m.generation_model:
                self._hook_module(role, module)
        for name, category in GENERATE_METHOD_CATEGORIES.items():
            self._wrap_method(m.generation_model, name, category)
        if m.wrapper is not None:
            for name in POSITION_METHODS:
                self._wrap_method(m.wrapper, name, "position_ids")
        self.study.install()  # after the stage hooks: its marks lie just inside theirs
        self._installed = True
        return self

    def remove(self) -> None:
        """Remove every hook and restore every wrapped method."""
        for handles in self._handles.values():
            for h in handles:
                h.remove()
        self._handles.clear()
        self.study.remove()
        for obj, name in reversed(self._wrapped):
            with contextlib.suppress(AttributeError):
                delattr(obj, name)
        self._wrapped.clear()
        self._installed = False

    def __enter__(self) -> StageHooks:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- activation -----------------------------------------------------------------------
    def activate(self, timeline: Timeline) -> None:
        """Send spans to ``timeline`` until ``deactivate``; ``errors`` then lists this measurement's."""
        self.timeline = timeline
        self.errors = []
        self._open = {}
        self._forward_done = False
        self.study.begin(timeline.use_cuda)

    def deactivate(self) -> None:
        self.timeline = None
        self._open = {}
        self.study.end()

    # -- internals ------------------------------------------------------------------------
    def _drop(self, role: str, exc: BaseException) -> None:
        msg = f"hook '{role}' failed and was dropped: {type(exc).__name__}: {exc}"
        log.warning(msg)
        self.errors.append(msg)
        self.dropped.setdefault(role, msg)
        for h in self._handles.pop(role, []):
            h.remove()

    def _hook_module(self, role: str, module: Any, top: bool = False) -> None:
        def pre(_mod: Any, _args: Any) -> None:
            tl = self.timeline
            if tl is None:
                return
            try:
                if top and tl.top_category() == FIRST_TOKEN:
                    tl.close(self._open.pop(FIRST_TOKEN, [-1])[-1])
                self._open.setdefault(role, []).append(tl.open(role))
            except Exception as exc:
                self._drop(role, exc)

        def post(_mod: Any, _args: Any, _out: Any) -> None:
            tl = self.timeline
            if tl is None:
                return
            try:
                stack = self._open.get(role)
                if stack:
                    tl.close(stack.pop())
                if top:
                    self._forward_done = True
                    self._maybe_open_first_token(tl)
            except Exception as exc:
                self._drop(role, exc)

        self._handles.setdefault(role, []).extend(
            [module.register_forward_pre_hook(pre), module.register_forward_hook(post, always_call=True)]
        )

    def _wrap_method(self, obj: Any, name: str, category: str) -> None:
        if name in vars(obj):  # already an instance attribute: leave it alone
            return
        original = getattr(obj, name, None)
        if original is None or not callable(original):
            return
        key = f"method:{name}"
        hooks = self

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tl = hooks.timeline
            sid = -1
            if tl is not None and key not in hooks._dropped_methods:
                try:
                    sid = tl.open(category)
                except Exception as exc:
                    hooks._drop_method(key, exc)
            try:
                return original(*args, **kwargs)
            finally:
                if sid >= 0 and tl is not None:
                    try:
                        tl.close(sid)
                        hooks._maybe_open_first_token(tl)
                    except Exception as exc:
                        hooks._drop_method(key, exc)

        setattr(obj, name, wrapper)
        self._wrapped.append((obj, name))

    def _maybe_open_first_token(self, tl: Timeline) -> None:
        """Once the first forward has returned to generate() itself, everything until generate()
        returns is picking the first token: logits processors, argmax / sampling, stop checks."""
        if self._forward_done and tl.top_category() == GENERATE:
            self._forward_done = False
            self._open[FIRST_TOKEN] = [tl.open(FIRST_TOKEN)]

    def _drop_method(self, key: str, exc: BaseException) -> None:
        msg = f"hook '{key}' failed and was dropped: {type(exc).__name__}: {exc}"
        log.warning(msg)
        self.errors.append(msg)
        self.dropped.setdefault(key, msg)
        self._dropped_methods.add(key)

    def dropped_categories(self) -> list[str]:
        """The span categories whose hooks were dropped (their stages are no longer measured)."""
        out = []
        for name in self.dropped:
            method = name.removeprefix("method:")
            if name == method:
                out.append(name)  # a module hook's role is its category
            else:
                out.append(GENERATE_METHOD_CATEGORIES.get(method, "position_ids"))
        return out

