"""lm-evaluation-harness 0.4.13's context truncation, counted (or refused, with ``truncate=False``).

Its HF model cuts a ``generate_until`` context to its last ``max_length − max_gen_toks`` tokens (``HFLM.
generate_until`` → ``tok_batch_encode(left_truncate_len=...)``) and a log-likelihood input to
``(ctx + cont)[-(max_length + 1):][:-1]``; both drop the start of a context longer than the model's window and
score what is left. ``Truncation`` applies the first, tells whether the second cut anything, counts both by
request kind, and keeps the flags of the last call so a caller can attribute them to tasks or samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lmmbench.core.errors import UserError

__all__ = ["KINDS", "Truncation"]

KINDS = ("generate_until", "loglikelihood")  # lm-eval's request kinds that a long context truncates
_REFUSE_HINT = "lm-eval left-truncates it; run without --no-truncate to do the same"


@dataclass
class Truncation:
    """Counts of truncated requests by kind; ``last``: one flag per request of the last call."""

    enabled: bool = True
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    last: list[bool] = field(default_factory=list)

    def snapshot(self) -> dict[str, int]:
        """A copy of the counts (diff two snapshots for one task's share)."""
        return dict(self.counts)

    def generation_context(self, ids: list[int], max_tokens: int, max_length: int) -> tuple[list[int], bool]:
        """(the context lm-eval's HF model generates from: the last ``max_length − max_tokens`` tokens, whether
        that cut anything)."""
        room = max_length - max_tokens
        if room <= 0:
            raise UserError(f"max_gen_toks {max_tokens} must be less than the model's context of {max_length} "
                            "tokens (as lm-eval asserts); lower it with --gen_kwargs max_gen_toks=N")  # fmt: skip
        cut = len(ids) > room
        if cut and not self.enabled:
            raise UserError(f"--no-truncate: a prompt of {len(ids)} tokens + max_gen_toks {max_tokens} exceeds the "
                            f"model's context of {max_length} tokens; {_REFUSE_HINT}")  # fmt: skip
        if cut:
            self.counts["generate_until"] += 1
        return (ids[-room:] if cut else ids), cut

    def loglikelihood_input(self, ctx: list[int], cont: list[int], max_length: int) -> bool:
        """Whether the input ``(ctx + cont)[:-1]`` of one pair exceeds ``max_length`` (lm-eval keeps its end)."""
        cut = len(ctx) + len(cont) - 1 > max_length
        if cut and not self.enabled:
            raise UserError(f"--no-truncate: a log-likelihood input of {len(ctx) + len(cont) - 1} tokens exceeds "
                            f"the model's context of {max_length} tokens; {_REFUSE_HINT}")  # fmt: skip
        if cut:
            self.counts["loglikelihood"] += 1
        return cut
