"""The sampler: next-token choice from a batch of logits, each row with its own parameters.

The split (as ByteMLPerf's): the engine produces logits, the sampler turns them into tokens. A replacement
sampler implements ``Sampler.sample``. ``TorchSampler`` does greedy, temperature, top-k, top-p and a
seeded ``torch.Generator`` per request (so a seeded request samples the same tokens alone or in
any batch), and keeps end-of-sequence out until ``min_tokens`` are generated.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lmmbench.engines.requests import RequestState, SamplingParams

if TYPE_CHECKING:
    import torch

__all__ = ["Sampler", "TorchSampler", "filter_logits"]


class Sampler(Protocol):
    """Chooses one next token per request from ``logits`` of shape ``[len(states), vocab]``."""

    def sample(self, states: Sequence[RequestState], logits: torch.Tensor) -> list[int]:
        """The next token id of each request, in order."""
        ...


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, top-k and top-p applied to one row of logits (``[vocab]``), float32."""
    import torch

    row = logits.float() / max(params.temperature, 1e-5)
    vocab = row.shape[-1]
    if 0 < params.top_k < vocab:
        kth = torch.topk(row, params.top_k).values[-1]
        row = row.masked_fill(row < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(row, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        cum = torch.cumsum(probs, dim=-1)
        # drop a token when the tokens before it already reach top_p (the first always stays)
        drop = (cum - probs) >= params.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        row = torch.empty_like(row).scatter_(0, order, sorted_logits)
    return row


class TorchSampler:
    """Greedy / temperature / top-k / top-p sampling with a generator per request."""

    def __init__(self, eos_token_ids: Sequence[int]) -> None:
        self.eos_token_ids = sorted({int(t) for t in eos_token_ids})

    def _generator(self, state: RequestState) -> Any:
        import torch

        if state.sampler_state is None:
            seed = state.sampling.seed
            gen = torch.Generator(device="cpu")
            gen.manual_seed(seed if seed is not None else random.getrandbits(63))
            state.sampler_state = gen
        return state.sampler_state

    def sample(self, states: Sequence[RequestState], logits: torch.Tensor) -> list[int]:
        """Next token per row; rows follow ``states``."""
        import torch

        logits = logits.float()
        suppress = [
            i
            for i, s in enumerate(states)
            if self.eos_token_ids and not s.sampling.ignore_eos and len(s.output_ids) < s.sampling.min_tokens
        ]
        if suppress:
            logits = logits.clone()
            rows = torch.tensor(suppress)
            for eos in self.eos_token_ids:
                if eos < logits.shape[-1]:
                    logits[rows, eos] = float("-inf")
        out = logits.argmax(dim=-1).tolist()
        for i, state in enumerate(states):
            params = state.sampling
            if params.greedy:
                continue
            row = filter_logits(logits[i].cpu(), params)
            probs = torch.softmax(row, dim=-1)
            out[i] = int(torch.multinomial(probs, 1, generator=self._generator(state)).item())
        return [int(t) for t in out]
