"""lm-evaluation-harness's common filters on generated text (``filter_list`` of a task file).

Each step works on the one response of a sample (lmmbench runs ``repeats: 1``), with lm-eval 0.4's
semantics: ``regex`` (``re.findall``; the ``group_select``-th match; of a tuple of groups the first
non-empty one; stripped; ``fallback`` when nothing matches), ``take_first`` (the single response),
``lowercase``, ``uppercase`` and ``remove_whitespace`` (strip).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.evaluation.task_config import FilterPipeline

__all__ = ["FILTER_FUNCTIONS", "apply_pipeline", "check_step"]

_REGEX_DEFAULT = r"#### (\-?[0-9\.\,]+)"


def _regex(text: str, opts: Mapping[str, Any]) -> str:
    pattern = re.compile(str(opts.get("regex_pattern", _REGEX_DEFAULT)))
    fallback = str(opts.get("fallback", "[invalid]"))
    found: Any = pattern.findall(text)
    if not found:
        return fallback
    match = found[int(opts.get("group_select", 0))]
    if isinstance(match, tuple):
        parts = [m for m in match if m]
        match = parts[0] if parts else fallback
    return str(match).strip()


def _identity(text: str, opts: Mapping[str, Any]) -> str:
    return text


FILTER_FUNCTIONS: dict[str, tuple[Callable[[str, Mapping[str, Any]], str], frozenset[str]]] = {
    "regex": (_regex, frozenset({"regex_pattern", "group_select", "fallback"})),
    "take_first": (_identity, frozenset()),
    "lowercase": (lambda t, o: t.lower(), frozenset()),
    "uppercase": (lambda t, o: t.upper(), frozenset()),
    "remove_whitespace": (lambda t, o: t.strip(), frozenset()),
}


def check_step(function: str, options: Mapping[str, Any], where: str) -> None:
    """A ``UserError`` naming ``where`` when a filter step is not one lmmbench runs."""
    if function not in FILTER_FUNCTIONS:
        known = ", ".join(FILTER_FUNCTIONS)
        raise UserError(f"{where}: filter function '{function}' is not supported; supported: {known}")
    extra = set(options) - FILTER_FUNCTIONS[function][1]
    if extra:
        raise UserError(f"{where}: filter '{function}' has unsupported option(s): {', '.join(sorted(extra))}")
    if function == "regex":
        try:
            re.compile(str(options.get("regex_pattern", _REGEX_DEFAULT)))
        except re.error as exc:
            raise UserError(f"{where}: regex_pattern is not a valid regular expression ({exc})") from None


def apply_pipeline(pipeline: FilterPipeline, text: str) -> str:
    """The response after every step of ``pipeline``, in order."""
    for step in pipeline.steps:
        fn = FILTER_FUNCTIONS[step.function][0]
        text = fn(text, step.options)
    return text
