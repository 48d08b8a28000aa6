"""The last decoder layer's MLP and query / output projections run only at the positions whose log-probs are
read: the same hidden states there, fewer rows through them, and a model whose last layer mixes positions
after them keeps the whole forward."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from float_tolerance import f32_close
from lmmbench.backends.read_positions import (
    checked_positionwise_modules,
    only_read_positions,
    positionwise_modules,
    read_positions_match,
)
from lmmbench.backends.scoring import InProcessScorer, LLRequest

REQUESTS = [
    LLRequest("Question: What is the capital of France?\nAnswer:", " Paris"),
    LLRequest("Question: What is the capital of France?\nAnswer:", " London is big"),
    LLRequest("The fox jumps over the dog. Then it", " ran away quickly."),
    LLRequest("The fox jumps over the dog. Then it", " slept."),
    LLRequest("Q: 2+2=?\nA:", " A"),
    LLRequest("Q: 2+2=?\nA:", " B"),
    LLRequest("A context with a single choice", " and its only continuation"),
]


class _Outputs:
    """Keeps a module's outputs (a forward hook)."""

    def __init__(self, module: Any) -> None:
        self.outputs: list[Any] = []
        self.handle = module.register_forward_hook(lambda _m, _a, out: self.outputs.append(out.detach().clone()))


class _RowCounter:
    """Counts the rows the last layer's MLP computes (a forward pre-hook on its first linear layer)."""

    def __init__(self, mlp: Any) -> None:
        self.rows: list[int] = []
        first_linear = next(m for m in mlp.modules() if isinstance(m, torch.nn.Linear))
        self.handle = first_linear.register_forward_pre_hook(self._count)

    def _count(self, _module: Any, args: Any) -> None:
        self.rows.append(int(args[0].shape[:-1].numel()))


def test_the_read_positions_get_the_whole_forwards_hidden_states(tiny_llm: Any) -> None:
    ids = torch.tensor([[5, 17, 99, 4, 23, 8, 61, 12, 7, 30]])
    keep = torch.tensor([2, 7, 9])
    found = positionwise_modules(tiny_llm.model)
    layer = tiny_llm.model.model.layers[-1]
    assert found == [layer.mlp, layer.self_attn.q_proj, layer.self_attn.o_proj]
    counter = _RowCounter(layer.mlp)
    queries = _Outputs(layer.self_attn.q_proj)
    try:
        with torch.no_grad():
            whole = tiny_llm.model(ids, output_hidden_states=True).hidden_states[-1][0]
            with only_read_positions(tiny_llm.model, keep):
                part = tiny_llm.model(ids, output_hidden_states=True).hidden_states[-1][0]
            again = tiny_llm.model(ids, output_hidden_states=True).hidden_states[-1][0]
    finally:
        counter.handle.remove()
        queries.handle.remove()
    assert counter.rows == [10, 3, 10]  # whole, the three read positions only, whole again after the block
    whole_q, part_q, _ = (q[0] for q in queries.outputs)  # the query projection: only the kept rows computed
    assert torch.equal(part_q[keep], whole_q[keep]) or torch.allclose(part_q[keep], whole_q[keep], atol=1e-6)
    assert bool((part_q[:2] == 0).all()) and not bool((whole_q[:2] == 0).all())
    assert torch.allclose(part[keep], whole[keep], rtol=0, atol=1e-6)
    assert not torch.allclose(part[:2], whole[:2])  # what is not read was not computed
    assert torch.equal(again, whole)  # the model is itself again after the block
    assert read_positions_match(tiny_llm.model, ids, found)
    assert checked_positionwise_modules(tiny_llm.model, ids) == found


def test_scoring_runs_the_last_mlp_on_read_positions_only(tiny_llm: Any) -> None:
    plain = InProcessScorer(tiny_llm, pad_batches=True, share_context=False)
    counter = _RowCounter(tiny_llm.model.model.layers[-1].mlp)
    try:
        restricted = plain.loglikelihood(REQUESTS)
    finally:
        counter.handle.remove()
    assert plain._positionwise == positionwise_modules(tiny_llm.model)
    n_read = sum(len(plain.encode_pair(r.context, r.continuation)[1]) for r in REQUESTS)
    # two checking forwards (16 tokens at most, then 3 rows), then one batch that reads each continuation
    assert len(counter.rows) == 3 and counter.rows[1] == 3 and counter.rows[2] <= n_read
    plain._positionwise = []  # the whole forward, as before the restriction existed
    whole = plain.loglikelihood(REQUESTS)
    for (a, ga), (b, gb) in zip(restricted, whole, strict=True):
        # the last MLP over fewer rows: other matrix shapes, so float32's spread (factor 1)
        assert f32_close(a, b, factor=1.0) and ga == gb


@pytest.fixture
def mixing_last_layer(tiny_llm: Any) -> Iterator[Any]:
    """tiny-llm whose last decoder layer adds, after its MLP, the running sum of its output over positions
    (what a model with attention after its last MLP would do)."""
    layer = tiny_llm.model.model.layers[-1]

    def mix(_module: Any, _args: Any, output: Any) -> Any:
        hidden = output[0] if isinstance(output, tuple) else output
        mixed = hidden + 0.1 * hidden.cumsum(dim=1)
        return (mixed, *output[1:]) if isinstance(output, tuple) else mixed

    handle = layer.register_forward_hook(mix)
    try:
        yield tiny_llm
    finally:
        handle.remove()


def test_a_last_layer_that_mixes_positions_keeps_the_whole_forward(mixing_last_layer: Any) -> None:
    ids = torch.tensor([[5, 17, 99, 4, 23, 8, 61, 12, 7, 30]])
    assert not read_positions_match(mixing_last_layer.model, ids, positionwise_modules(mixing_last_layer.model))
    assert checked_positionwise_modules(mixing_last_layer.model, ids) == []
    scorer = InProcessScorer(mixing_last_layer, pad_batches=True, share_context=False)
    got = scorer.loglikelihood(REQUESTS)
    assert scorer._positionwise == []
    whole = InProcessScorer(mixing_last_layer, batch_size=1, share_context=False)
    whole._positionwise = []
    for (a, ga), (b, gb) in zip(got, whole.loglikelihood(REQUESTS), strict=True):
        # padded batch against batch 1 through the mixing layer's cumulative sum over positions: factor 10, as
        # the running sum adds up to ten rounded terms per position
        assert f32_close(a, b, factor=10.0) and ga == gb
