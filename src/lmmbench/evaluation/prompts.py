"""Prompt rendering in sandboxed Jinja2 and few-shot contexts, with lm-evaluation-harness semantics.

``doc_to_text`` / ``doc_to_target`` / ``doc_to_choice`` are a column name or a Jinja2 template.
A target that renders to digits is an index into the choices; a choice template must render to a
Python list literal. The few-shot context is
``description + Σ(text_i + target_delimiter + answer_i + fewshot_delimiter) + text``, the examples
drawn with one ``random.Random(seed)`` walked over the samples in order (n + 1 drawn and the
evaluated sample removed when the pool is the evaluated set), exactly as lm-evaluation-harness 0.4.13.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field
from typing import Any

from lmmbench.config.limits import check_limit, limit_value
from lmmbench.core.errors import UserError
from lmmbench.evaluation.task_config import TaskConfig

__all__ = ["PromptRenderer", "RenderedSample", "chat_messages", "maybe_delimit"]


def maybe_delimit(prefix: str | None, suffix: str | None, delimiter: str = " ") -> str:
    """lm-eval's join of a system instruction and a description: a delimiter only if neither has space."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix
    return prefix + suffix if (prefix[-1].isspace() or suffix[0].isspace()) else prefix + delimiter + suffix


def _regex_replace(value: str, pattern: str, repl: str, count: int = 0) -> str:
    return re.sub(pattern, repl, value, count=count)


@dataclass
class RenderedSample:
    """Everything the model is asked for one sample, before tokenisation."""

    doc_id: int
    context: str
    target: Any  # str, int index (MC) or list of str
    choices: list[str] | None
    gold: int | None
    references: list[str]
    user_text: str = ""  # the context without the description: the user turn when a chat template is used
    examples: list[tuple[str, str]] = field(default_factory=list)  # few-shot (text, answer) pairs
    question: str = ""  # this sample's own text


def chat_messages(sample: RenderedSample, system: str | None, multiturn: bool) -> list[dict[str, str]]:
    """lm-eval's chat messages: system (+ description), then the few-shot examples as user / assistant
    turns (``multiturn``) or everything in one user turn, then the question."""
    messages = [{"role": "system", "content": system}] if system else []
    if not multiturn:
        return [*messages, {"role": "user", "content": sample.user_text}]
    for text, answer in sample.examples:
        messages.append({"role": "user", "content": text})
        if answer != "":
            messages.append({"role": "assistant", "content": answer})
    messages.append({"role": "user", "content": sample.question})
    return messages


def _bounded_environment() -> Any:
    """A sandboxed Jinja environment whose ``*`` and ``**`` cannot build a string or number past the
    ``prompt_chars`` bound (``'x' * 10**9`` fails at once instead of allocating a gigabyte)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):  # type: ignore[misc]
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            bound = limit_value("prompt_chars")
            if operator == "*" and isinstance(right, int) and hasattr(left, "__len__"):
                check_limit("prompt_chars", len(left) * right, "a template repeats a string or list to length")
            if operator == "*" and isinstance(left, int) and hasattr(right, "__len__"):
                check_limit("prompt_chars", len(right) * left, "a template repeats a string or list to length")
            big_power = isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0
            if operator == "**" and big_power and right * abs(left).bit_length() > bound:
                raise UserError(f"a template computes {left} ** {right}: too large a number")
            return super().call_binop(context, operator, left, right)

    return BoundedEnvironment


def _render_bounded(tpl: Any, doc: dict[str, Any]) -> str:
    """Render ``tpl`` piece by piece, stopping once the text passes the ``prompt_chars`` bound."""
    bound = limit_value("prompt_chars")
    parts: list[str] = []
    size = 0
    for piece in tpl.generate(**doc):
        size += len(piece)
        if size > bound:
            check_limit("prompt_chars", size, "a template renders a prompt of length")
        parts.append(piece)
    return "".join(parts)


class PromptRenderer:
    """Renders the prompts of one task over its samples."""

    def __init__(self, task: TaskConfig, columns: set[str]) -> None:
        from jinja2 import StrictUndefined

        self.task = task
        self.columns = columns
        self.env = _bounded_environment()(undefined=StrictUndefined, keep_trailing_newline=True)
        self.env.filters["regex_replace"] = _regex_replace
        self._compiled: dict[str, Any] = {}

    def _where(self, field: str) -> str:
        """The file a field's template came from: the prompt file for a registered prompt's ``doc_to_text``."""
        record = self.task.prompt_record
        if field == "doc_to_text" and record and not record.get("source", "").startswith("python"):
            return f"{record['source']} (prompt {record['ref']} of {self.task.source_file})"
        return self.task.source_file

    def _render(self, field: str, template: str, doc: dict[str, Any], doc_id: int) -> str:
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError

        try:
            tpl = self._compiled.get(template)
            if tpl is None:
                tpl = self.env.from_string(template)
                self._compiled[template] = tpl
            return _render_bounded(tpl, doc)
        except SecurityError as exc:
            raise UserError(f"{self._where(field)}: field '{field}': the template does something jinja2's sandbox "
                            f"refuses ({exc}); a prompt template may only format the sample") from None  # fmt: skip
        except (TemplateError, UserError) as exc:
            line = getattr(exc, "lineno", None)
            where = f" (template line {line})" if line else ""
            raise UserError(
                f"{self._where(field)}: field '{field}'{where}, sample {doc_id}: template error: {exc}"
            ) from None
        except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, RecursionError) as exc:
            raise UserError(
                f"{self._where(field)}: field '{field}', sample {doc_id}: the template failed while rendering "
                f"({type(exc).__name__}: {exc}); fix the template"
            ) from None

    def text(self, doc: dict[str, Any], doc_id: int) -> str:
        """The prompt of one sample (lm-eval's ``doc_to_text``)."""
        t = self.task.doc_to_text
        if t in self.columns:
            return str(doc[t])
        return self._render("doc_to_text", t, doc, doc_id)

    def choices(self, doc: dict[str, Any], doc_id: int) -> list[str] | None:
        """The answer choices (lm-eval's ``doc_to_choice``)."""
        c = self.task.doc_to_choice
        if c is None:
            return None
        if isinstance(c, list):
            return [str(x) for x in c]
        if c in self.columns:
            value: Any = doc[c]
        else:
            rendered = self._render("doc_to_choice", c, doc, doc_id)
            try:
                value = ast.literal_eval(rendered)
            except (ValueError, SyntaxError):
                raise UserError(
                    f"{self.task.source_file}: field 'doc_to_choice', sample {doc_id}: "
                    f"must render to a list literal, got {rendered[:60]!r}"
                ) from None
        if isinstance(value, dict):
            value = list(value.values())
        if not isinstance(value, (list, tuple)) or not value:
            raise UserError(f"{self.task.source_file}: field 'doc_to_choice', sample {doc_id}: not a list of choices")
        return [str(x) for x in value]

    def target(self, doc: dict[str, Any], doc_id: int) -> Any:
        """The answer (lm-eval's ``doc_to_target``): an index for MC, else text or a list of texts."""
        t = self.task.doc_to_target
        if isinstance(t, int):  # lm-eval: an integer target is an index into the choices
            return t
        if t in self.columns:
            return doc[t]
        s = self._render("doc_to_target", t, doc, doc_id)
        if s.isdigit() and self.task.doc_to_choice is not None:
            return ast.literal_eval(s)
        if len(s) >= 2 and s[0] == "[" and s[-1] == "]":
            try:
                return ast.literal_eval(s)
            except (ValueError, SyntaxError):
                return s
        return s

    def answer_text(self, target: Any, choices: list[str] | None) -> str:
        """The answer as text, as it appears after a few-shot example."""
        if choices and isinstance(target, int):
            return choices[target]
        if isinstance(target, list):
            return str(target[0])
        return str(target)

    def _draw(self, rnd: random.Random, pool: list[dict[str, Any]], exclude: dict[str, Any] | None) -> list[Any]:
        """The few-shot examples of one sample: lm-eval's ``first_n`` or its seeded default sampler."""
        n = self.task.fewshot.num
        if self.task.fewshot.sampler == "first_n":
            return [x for x in pool if exclude is None or x != exclude][:n]
        if exclude is None:
            return rnd.sample(pool, n)
        drawn = [x for x in rnd.sample(pool, n + 1) if x != exclude][:n]
        if len(drawn) < n:
            drawn = rnd.sample([x for x in pool if x != exclude], n)
        return drawn

    def render_all(
        self, docs: list[dict[str, Any]], pool: list[dict[str, Any]] | None = None, pool_is_eval_split: bool = True
    ) -> list[RenderedSample]:
        """Render every sample in order; few-shot examples come from ``pool`` (default: ``docs``).

        With ``pool_is_eval_split`` the evaluated sample is never its own example (the pool is the
        whole split even when ``docs`` is limited, as in lm-eval).
        """
        fs = self.task.fewshot
        rnd = random.Random(fs.seed)
        same_pool = pool_is_eval_split
        fs_docs = docs if pool is None else pool
        need = fs.num + (1 if same_pool else 0)
        if fs.num > 0 and len(fs_docs) < need:
            raise UserError(
                f"{self.task.source_file}: fewshot.num {fs.num} needs at least {need} samples in the few-shot pool, "
                f"which has {len(fs_docs)}"
            )
        out: list[RenderedSample] = []
        for i, doc in enumerate(docs):
            prefix = ""
            examples: list[tuple[str, str]] = []
            if fs.num > 0:
                for ex in self._draw(rnd, fs_docs, doc if same_pool else None):
                    ex_choices = self.choices(ex, i)
                    ans = self.answer_text(self.target(ex, i), ex_choices)
                    prefix += self.text(ex, i)
                    examples.append((self.text(ex, i), ans))
                    if ans != "":
                        prefix += self.task.target_delimiter + ans + self.task.fewshot_delimiter
            choices = self.choices(doc, i)
            target = self.target(doc, i)
            gold: int | None = None
            if choices is not None and self.task.kind == "multiple_choice":
                if isinstance(target, str):
                    if target not in choices:
                        raise UserError(
                            f"{self.task.source_file}: sample {i}: target {target!r} is not one of the choices"
                        )
                    gold = choices.index(target)
                elif isinstance(target, int) and 0 <= target < len(choices):
                    gold = target
                else:
                    raise UserError(f"{self.task.source_file}: sample {i}: target {target!r} is not a choice index")
            refs = [str(x) for x in target] if isinstance(target, list) else [self.answer_text(target, choices)]
            question = self.text(doc, i)
            user = prefix + question
            # lm-eval: a system instruction joins the description (a system message with a chat template)
            head = maybe_delimit(self.task.system_prompt, self.task.description, self.task.fewshot_delimiter)
            out.append(RenderedSample(i, head + user, target, choices, gold, refs, user, examples, question))
        return out
