"""A batched KV cache whose rows join and leave at every step (right-aligned, left-padded).

Every running request owns one row. All rows end at the same column (the newest token), so one
decode forward appends one column for the whole batch. A newcomer's cache (from its own prefill)
is left-padded to the batch length, or the batch is left-padded to the newcomer's length, and the
rows are concatenated; a leaving row is dropped and leading columns that no row uses any more are
trimmed. Padded columns are masked out of attention, so they contribute exactly zero weight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["BatchKVCache"]


def _pad_left(t: torch.Tensor, cols: int, dim: int) -> torch.Tensor:
    import torch

    if cols == 0:
        return t
    shape = list(t.shape)
    shape[dim] = cols
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class BatchKVCache:
    """Rows of key/value states plus a ``[rows, length]`` mask of real (1) and padded (0) columns."""

    def __init__(self) -> None:
        self.cache: Any = None  # a transformers DynamicCache holding [rows, heads, length, dim] per layer
        self.mask: torch.Tensor | None = None
        self.row_ids: list[str] = []

    @property
    def rows(self) -> int:
        """Number of rows (running requests)."""
        return len(self.row_ids)

    @property
    def length(self) -> int:
        """Number of columns (cached positions, padding included)."""
        return 0 if self.mask is None else int(self.mask.shape[1])

    def _layers(self, cache: Any) -> list[Any]:
        layers = list(cache.layers)
        for layer in layers:
            if getattr(layer, "is_sliding", False):
                raise NotImplementedError("sliding-window cache layers are not supported by BatchKVCache")
        return layers

    def join(self, cache: Any, mask: torch.Tensor, row_ids: list[str]) -> None:
        """Add the rows of another right-aligned ``cache`` with its ``mask`` (``[rows, length]``)."""
        import torch

        if self.cache is None or self.mask is None or not self.row_ids:
            self.cache, self.mask, self.row_ids = cache, mask, list(row_ids)
            return
        length = max(self.length, int(mask.shape[1]))
        pad_self, pad_new = length - self.length, length - int(mask.shape[1])
        for mine, theirs in zip(self._layers(self.cache), self._layers(cache), strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, pad_self, 2), _pad_left(theirs.keys, pad_new, 2)])
            mine.values = torch.cat([_pad_left(mine.values, pad_self, 2), _pad_left(theirs.values, pad_new, 2)])
        self.mask = torch.cat([_pad_left(self.mask, pad_self, 1), _pad_left(mask, pad_new, 1)])
        self.row_ids.extend(row_ids)

    def keep(self, row_ids: list[str]) -> None:
        """Keep only ``row_ids`` (in the current row order) and trim columns no row uses."""
        import torch

        keep = set(row_ids)
        if keep == set(self.row_ids):
            return
        if not keep or self.mask is None:
            self.cache, self.mask, self.row_ids = None, None, []
            return
        index = [i for i, rid in enumerate(self.row_ids) if rid in keep]
        idx = torch.tensor(index, device=self.mask.device)
        mask = self.mask.index_select(0, idx)
        used = mask.any(dim=0).nonzero()
        start = int(used[0].item()) if used.numel() else 0
        for layer in self._layers(self.cache):
            layer.keys = layer.keys.index_select(0, idx)[:, :, start:]
            layer.values = layer.values.index_select(0, idx)[:, :, start:]
        self.mask = mask[:, start:]
        self.row_ids = [self.row_ids[i] for i in index]

    def extend_mask(self) -> torch.Tensor:
        """The mask with one more real column for the token being decoded (not stored)."""
        import torch

        assert self.mask is not None
        return torch.cat([self.mask, self.mask.new_ones((self.rows, 1))], dim=1)

    def commit_step(self, extended_mask: torch.Tensor) -> None:
        """Record that a decode forward appended one column to every row."""
        self.mask = extended_mask
