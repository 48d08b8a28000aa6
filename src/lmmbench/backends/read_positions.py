"""The last decoder layer's MLP run only at the positions whose log-probs are read.

In a decoder-only transformer the last layer's MLP output at a position feeds only that position's final norm
and vocabulary projection. Scoring reads a few positions of each input (MMLU: one), so the MLP of the other
positions is work whose result nobody reads; it is most of the last layer's cost, and with few layers (or a
wide MLP) a large share of the whole forward. Keys and values, the attention and every earlier layer run at
every position as before, so the read positions get the same numbers (float32 rounding of a matmul over
fewer rows apart). Whether a model fits is checked once, numerically, on a short input
(``read_positions_match``); a model that does not keeps the whole forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["last_layer_mlp", "only_read_positions", "read_positions_match"]

_MATCH_TOLERANCE = 1e-4  # relative to the largest hidden value: rounding passes, a skipped dependency does not


def last_layer_mlp(model: Any) -> tuple[Any, str] | None:
    """(the last decoder layer, the name of its MLP attribute), or None when the model has no such layout:
    a ``ModuleList`` of ``num_hidden_layers`` layers, the last one with an ``mlp`` module."""
    import torch

    cfg = getattr(model.config, "text_config", None) or model.config
    n_layers = getattr(cfg, "num_hidden_layers", None)
    candidates = [
        m for name, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h") and len(m) == n_layers
    ]  # fmt: skip
    if len(candidates) != 1:
        return None
    last = candidates[0][-1]
    if not isinstance(getattr(last, "mlp", None), torch.nn.Module):
        return None
    return last, "mlp"


class _AtPositions:
    """An MLP's own ``forward`` on the rows ``keep`` (flat indices into batch x positions) of its input;
    zeros elsewhere."""

    def __init__(self, forward: Any, keep: Any) -> None:
        self.forward = forward
        self.keep = keep

    def __call__(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        flat = hidden.reshape(-1, hidden.shape[-1])
        picked = self.forward(flat[self.keep].unsqueeze(0), *args, **kwargs)
        if not isinstance(picked, torch.Tensor):
            raise TypeError("the MLP returned more than a tensor")
        out = torch.zeros_like(flat)
        out[self.keep] = picked.squeeze(0).to(out.dtype)
        return out.view(hidden.shape)


@contextmanager
def only_read_positions(model: Any, keep: Any) -> Iterator[None]:
    """Within the block the last layer's MLP runs only at ``keep`` (a LongTensor of flat batch x position
    indices of the next forward's input); ``keep=None`` changes nothing."""
    found = last_layer_mlp(model) if keep is not None else None
    if found is None:
        yield
        return
    layer, attr = found
    inner = getattr(layer, attr)
    own = inner.__dict__.get("forward")  # set on the instance already (accelerate's hooks do that)
    inner.forward = _AtPositions(inner.forward, keep)  # an instance attribute: the module stays registered
    try:
        yield
    finally:
        if own is None:
            del inner.forward  # the class's forward again
        else:
            inner.forward = own


def read_positions_match(model: Any, input_ids: Any) -> bool:
    """Whether the last hidden states at the last three positions of ``input_ids`` (one row) are the same with
    the MLP run only there as with the whole forward (a model whose last layer mixes positions after its MLP
    fails this)."""
    import torch

    if last_layer_mlp(model) is None:
        return False
    width = int(input_ids.shape[-1])
    keep = torch.arange(max(0, width - 3), width, device=input_ids.device)
    with torch.no_grad():
        whole = model(input_ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1][0, keep]
        try:
            with only_read_positions(model, keep):
                part = model(input_ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1][0, keep]
        except (TypeError, RuntimeError, IndexError):
            return False
    scale = float(whole.abs().max()) or 1.0
    return bool(part.shape == whole.shape and float((part - whole).abs().max()) <= _MATCH_TOLERANCE * scale)
