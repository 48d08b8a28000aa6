"""The last decoder layer's position-wise work run only at the positions whose log-probs are read.

In a decoder-only transformer the last layer's MLP output at a position feeds only that position's final norm
and vocabulary projection, and so do its attention's query and output projections. Scoring reads a few
positions of each input (MMLU: one), so that work at the other positions has a result nobody reads; it is
most of the last layer's cost, and with few layers (or a wide MLP) a large share of the whole forward. Keys
and values, the attention itself and every earlier layer run at every position as before, so the read
positions get the same numbers (float32 rounding of a matmul over fewer rows apart). Whether a model fits is
checked once, numerically, on a short input (``checked_positionwise_modules``); a model that does not keeps
the whole forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["checked_positionwise_modules", "only_read_positions", "positionwise_modules", "read_positions_match"]

_MATCH_TOLERANCE = 1e-4  # relative to the largest hidden value: rounding passes, a skipped dependency does not


def positionwise_modules(model: Any) -> list[Any]:
    """The last decoder layer's modules whose output at a position feeds only that position: its ``mlp``, and
    its attention's separate query and output projections (``q_proj``; ``o_proj`` / ``out_proj``), when
    present. Empty when the model has no such layout (one ``ModuleList`` of ``num_hidden_layers`` layers)."""
    import torch

    cfg = getattr(model.config, "text_config", None) or model.config
    n_layers = getattr(cfg, "num_hidden_layers", None)
    candidates = [
        m for name, m in model.named_modules()
        if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "h") and len(m) == n_layers
    ]  # fmt: skip
    if len(candidates) != 1:
        return []
    last = candidates[0][-1]
    mlp = getattr(last, "mlp", None)
    if not isinstance(mlp, torch.nn.Module):
        return []
    attention = getattr(last, "self_attn", None)
    projections = [getattr(attention, name, None) for name in ("q_proj", "o_proj", "out_proj")]
    return [mlp] + [p for p in projections if isinstance(p, torch.nn.Linear)]


class _AtPositions:
    """A module's own ``forward`` on the rows ``keep`` (flat indices into batch x positions) of its input;
    zeros elsewhere."""

    def __init__(self, forward: Any, keep: Any) -> None:
        self.forward = forward
        self.keep = keep

    def __call__(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        flat = hidden.reshape(-1, hidden.shape[-1])
        picked = self.forward(flat[self.keep].unsqueeze(0), *args, **kwargs)
        if not isinstance(picked, torch.Tensor):
            raise TypeError("the module returned more than a tensor")
        picked = picked.squeeze(0)
        out = picked.new_zeros((flat.shape[0], picked.shape[-1]))
        out[self.keep] = picked
        return out.view(*hidden.shape[:-1], picked.shape[-1])


@contextmanager
def only_read_positions(model: Any, keep: Any, modules: list[Any] | None = None) -> Iterator[None]:
    """Within the block the last layer's position-wise ``modules`` (default: ``positionwise_modules``) run
    only at ``keep`` (a LongTensor of flat batch x position indices of the next forward's input);
    ``keep=None`` changes nothing."""
    wrapped = [] if keep is None else (positionwise_modules(model) if modules is None else modules)
    own = [m.__dict__.get("forward") for m in wrapped]  # set on the instance already (accelerate's hooks)
    for m in wrapped:
        m.forward = _AtPositions(m.forward, keep)  # an instance attribute: the module stays registered
    try:
        yield
    finally:
        for m, before in zip(wrapped, own, strict=True):
            if before is None:
                del m.forward  # the class's forward again
            else:
                m.forward = before


def read_positions_match(model: Any, input_ids: Any, modules: list[Any]) -> bool:
    """Whether the last hidden states at the last three positions of ``input_ids`` (one row) are the same with
    ``modules`` run only there as with the whole forward (a model whose last layer mixes positions after one
    of them fails this)."""
    import torch

    if not modules:
        return False
    width = int(input_ids.shape[-1])
    keep = torch.arange(max(0, width - 3), width, device=input_ids.device)
    with torch.no_grad():
        whole = model(input_ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1][0, keep]
        try:
            with only_read_positions(model, keep, modules):
                part = model(input_ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1][0, keep]
        except (TypeError, RuntimeError, IndexError):
            return False
    scale = float(whole.abs().max()) or 1.0
    return bool(part.shape == whole.shape and float((part - whole).abs().max()) <= _MATCH_TOLERANCE * scale)


def checked_positionwise_modules(model: Any, input_ids: Any) -> list[Any]:
    """The position-wise modules that may run at the read positions only, checked on ``input_ids``: all of
    ``positionwise_modules``, else the MLP alone, else none."""
    found = positionwise_modules(model)
    for modules in (found, found[:1]):
        if modules and read_positions_match(model, input_ids, modules):
            return modules
    return []
