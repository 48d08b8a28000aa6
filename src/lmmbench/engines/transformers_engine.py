"""The engine of the scheduler / engine / sampler split (as ByteMLPerf's) for transformers models:
prefill and batched decode forwards.

``TransformersEngine`` owns the model and a ``BatchKVCache``. ``prefill`` runs newcomers' prompts
(text prompts of a text model together, left-padded; multimodal prompts one at a time, exactly as
``generate`` would) and adds their rows to the running batch; ``decode`` runs one forward that
appends one token to every running row. Masks are built here as 4-D boolean (SDPA) or additive
(eager) tensors, and position ids per row (1-D RoPE, or M-RoPE with each request's rope delta), so
a padded column contributes nothing and each row sees exactly the positions it would see alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from lmmbench.engines.cache_names import cache_kwarg, returned_cache
from lmmbench.engines.inputs import InputError, InputPreparer
from lmmbench.engines.kv_cache import BatchKVCache
from lmmbench.engines.kv_reuse import rope_delta_owner
from lmmbench.engines.requests import GenerationRequest, PreparedInput, RequestState

__all__ = ["Engine", "TransformersEngine", "process_memory_bytes"]


class Engine(Protocol):
    """What the scheduler loop needs from an engine (a hardware backend may bring its own)."""

    tokenizer: Any
    eos_token_ids: list[int]
    max_context_tokens: int

    def prepare(self, request: GenerationRequest) -> PreparedInput:
        """Model input of a request (tokenization, images, audio); ``InputError`` if malformed."""
        ...

    def prefill(self, states: Sequence[RequestState]) -> Any:
        """Run the prompts of ``states``, add them to the running batch; last-position logits ``[n, vocab]``."""
        ...

    def decode(self, states: Sequence[RequestState]) -> Any:
        """Feed each running state's last token; next-token logits ``[n, vocab]`` in ``states`` order."""
        ...

    def release(self, request_ids: Sequence[str]) -> None:
        """Drop these requests from the running batch (finished, cancelled or failed)."""
        ...

    def memory_bytes(self) -> int:
        """Memory in use now (device memory on an accelerator, resident set size on CPU)."""
        ...


_statm: tuple[int, int] | None = None  # (pid that opened it, fd): a forked child opens its own


def process_memory_bytes() -> int:
    """Resident set size of this process, in bytes (the peak RSS where /proc cannot be read).

    Read every engine step: ``/proc/self/statm`` stays open and is re-read with ``pread`` (a third
    of the cost of opening it each time).
    """
    global _statm
    try:
        if _statm is None or _statm[0] != os.getpid():
            _statm = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class TransformersEngine:
    """Continuous-batching forwards over a transformers causal LM, Qwen VL or Qwen Omni thinker."""

    def __init__(self, loaded: Any, max_prefill_batch: int = 16) -> None:
        import torch

        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.processor = loaded.processor
        self.device = loaded.device if loaded.device is not None else torch.device("cpu")
        self.family: str = loaded.ref.family
        self.mrope = self.family != "causal_lm"
        self.max_prefill_batch = max(1, max_prefill_batch)
        self.preparer = InputPreparer(self.tokenizer, self.processor, has_audio=loaded.ref.has_audio)
        text_cfg = self.model.config.get_text_config(decoder=True)
        self.max_context_tokens = int(getattr(text_cfg, "max_position_embeddings", 0) or 1 << 30)
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)
        self.sdpa = getattr(self.model.config, "_attn_implementation", "sdpa") != "eager"
        eos: set[int] = set()
        for src in (getattr(self.model, "generation_config", None), text_cfg, self.tokenizer):
            value = getattr(src, "eos_token_id", None)
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, (list, tuple)):
                eos.update(int(v) for v in value)
        self.eos_token_ids = sorted(eos)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad) if pad is not None else (self.eos_token_ids[0] if eos else 0)
        self.kv = BatchKVCache()
        self.next_position: dict[str, int] = {}

    # -- inputs -----------------------------------------------------------------------------
    def prepare(self, request: GenerationRequest) -> PreparedInput:
        """Model input of ``request`` (see ``InputPreparer``); token ids must be in the vocabulary."""
        prepared = self.preparer.prepare(request)
        vocab = self.vocab_size
        if any(t < 0 or t >= vocab for t in prepared.input_ids):
            raise InputError(f"prompt: token ids must be in [0, {vocab})")
        return prepared

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _attention(self, mask2d: Any, causal: bool) -> Any:
        """4-D mask ``[rows, 1, q, kv]`` from a ``[rows, kv]`` 0/1 mask (queries are the last q columns)."""
        import torch

        kv = int(mask2d.shape[1])
        keys = mask2d.bool()[:, None, None, :]
        if causal:
            q = kv
            tri = torch.ones(q, kv, dtype=torch.bool, device=mask2d.device).tril()
            eye = torch.eye(q, kv, dtype=torch.bool, device=mask2d.device)
            allowed = (tri[None, None] & keys) | eye[None, None]  # padded queries see themselves: no NaN
        else:
            allowed = keys
        if self.sdpa:
            return allowed
        dtype = self.model.dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=mask2d.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )

    # -- prefill ----------------------------------------------------------------------------
    def _prefill_text(self, states: Sequence[RequestState]) -> Any:
        import torch

        longest = max(len(s.prepared.input_ids) for s in states)
        ids = torch.full((len(states), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(states), longest), dtype=torch.long)
        for row, s in enumerate(states):
            n = len(s.prepared.input_ids)
            ids[row, longest - n :] = torch.tensor(s.prepared.input_ids, dtype=torch.long)
            mask[row, longest - n :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self._new_cache()
        out = self.model(
            input_ids=ids,
            attention_mask=self._attention(mask, causal=True),
            position_ids=positions,
            **{cache_kwarg(self.model): cache},
            use_cache=True,
            logits_to_keep=1,
        )
        self.kv.join(returned_cache(out), mask, [s.request_id for s in states])
        for s in states:
            self.next_position[s.request_id] = len(s.prepared.input_ids)
        return out.logits[:, -1, :]

    def _prefill_one(self, state: RequestState) -> Any:
        import torch

        ids = torch.tensor([state.prepared.input_ids], dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        extra = {k: (v.to(self.device) if hasattr(v, "to") else v) for k, v in state.prepared.model_kwargs.items()}
        owner = rope_delta_owner(self.model) if self.mrope else None
        if owner is not None:
            owner.rope_deltas = None  # stateful in transformers: never reuse another request's
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            **{cache_kwarg(self.model): self._new_cache()},
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        delta = 0
        if owner is not None and owner.rope_deltas is not None:
            delta = int(owner.rope_deltas.reshape(-1)[0].item())
            owner.rope_deltas = None
        self.kv.join(returned_cache(out), mask, [state.request_id])
        self.next_position[state.request_id] = ids.shape[1] + delta
        return out.logits[:, -1, :]

    def prefill(self, states: Sequence[RequestState]) -> Any:
        """Prompts of ``states`` through the model; they join the running batch."""
        import torch

        with torch.inference_mode():
            rows: dict[str, Any] = {}
            text = [s for s in states if not self.mrope and not s.prepared.multimodal]
            for i in range(0, len(text), self.max_prefill_batch):
                group = text[i : i + self.max_prefill_batch]
                logits = self._prefill_text(group)
                for row, s in enumerate(group):
                    rows[s.request_id] = logits[row]
            for s in states:
                if s.request_id not in rows:
                    rows[s.request_id] = self._prefill_one(s)[0]
            return torch.stack([rows[s.request_id] for s in states])

    # -- decode -----------------------------------------------------------------------------
    def decode(self, states: Sequence[RequestState]) -> Any:
        """One token for every running row; logits in ``states`` order."""
        import torch

        by_id = {s.request_id: s for s in states}
        if set(by_id) != set(self.kv.row_ids):
            raise RuntimeError("decode() must be given exactly the running requests")
        order = self.kv.row_ids
        with torch.inference_mode():
            tokens = torch.tensor([[by_id[r].output_ids[-1]] for r in order], dtype=torch.long, device=self.device)
            positions = torch.tensor([[self.next_position[r]] for r in order], dtype=torch.long, device=self.device)
            if self.mrope:
                positions = positions[None].expand(3, -1, -1)
            mask = self.kv.extend_mask()
            out = self.model(
                input_ids=tokens,
                attention_mask=self._attention(mask, causal=False),
                position_ids=positions,
                **{cache_kwarg(self.model): self.kv.cache},
                use_cache=True,
                logits_to_keep=1,
            )
            self.kv.commit_step(mask)
            for r in order:
                self.next_position[r] += 1
            logits = out.logits[:, -1, :]
            row_of = {r: i for i, r in enumerate(order)}
            index = torch.tensor([row_of[s.request_id] for s in states], device=logits.device)
            return logits.index_select(0, index)

    def release(self, request_ids: Sequence[str]) -> None:
        """Drop rows of finished/cancelled requests."""
        gone = set(request_ids)
        if not gone:
            return
        self.kv.keep([r for r in self.kv.row_ids if r not in gone])
        for r in gone:
            self.next_position.pop(r, None)

    def memory_bytes(self) -> int:
        """Allocated device memory on CUDA, else the process's resident set size."""
        if self.device.type == "cuda":
            import torch

            return int(torch.cuda.memory_allocated(self.device))
        return process_memory_bytes()
