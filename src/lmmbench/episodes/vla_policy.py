"""The VLA-shaped policy (``models.vla``) as an episodes policy: a prefix cache per episode, one batched
action-expert call per tick.

* ``plan`` (the vision-language part) runs once per episode, for every slot that starts an episode in the
  tick in one batch: the observation's image (resized to the shape's image size), the instruction (a
  deterministic word-hash tokenizer, padded to 64 tokens with a mask), the proprioception now and one step
  before, and the episode's elapsed time go through the prefix encoder; each episode keeps its own rows of
  the cache, its padding cut off.
* ``act`` stacks the caches of every slot that needs actions this tick (right-padded, padding masked) and
  makes one ``ActionExpert`` call: 10 flow-matching steps from noise drawn from each episode's own generator
  to a ``(32, 32)`` chunk of normalized actions. The chunk is kept in the episode's trace (what the
  batched-vs-serial comparison reads) and its first ``execute_steps`` actions are executed.
Observations are dicts with ``image`` (H, W, 3), ``state``, ``previous_state``, ``instruction`` and
``time_s`` (``episodes.pusht`` makes them); the environment maps normalized actions to its own units.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmmbench.episodes.protocols import ActItem, EpisodeKey, EpisodeMemory
from lmmbench.models.vla import VLA_SHAPES, PrefixCache, VlaConfig, build_vla, stack_caches

__all__ = ["VlaPolicy", "instruction_tokens"]


def instruction_tokens(text: str, cfg: VlaConfig) -> tuple[list[int], int]:
    """Token ids of ``text`` (one per word, hashed into the vocabulary, 0 is padding) and its length."""
    ids = [1 + int.from_bytes(hashlib.sha1(w.encode()).digest()[:4], "little") % (cfg.vocab - 1)
           for w in text.lower().split()][: cfg.instruction_tokens]
    return ids + [0] * (cfg.instruction_tokens - len(ids)), len(ids)


def _state(values: Any, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.float32)
    flat = np.asarray(values, dtype=np.float32).ravel()[:size]
    out[: flat.size] = flat
    return out


class VlaPolicy:
    """A VLA-shaped policy with random weights (``shape`` one of ``models.vla.VLA_SHAPES``)."""

    batched_planning = True

    def __init__(self, shape: str = "pi0-tiny", *, device: str = "cpu", weight_seed: int = 0,
                 execute_steps: int = 1, num_layers: int | None = None) -> None:
        cfg = VLA_SHAPES[shape].with_layers(num_layers)
        if not 1 <= execute_steps <= cfg.horizon:
            raise ValueError(f"execute_steps must be 1..{cfg.horizon}")
        self.cfg, self.name, self.execute_steps = cfg, cfg.name, execute_steps
        self.device = torch.device(device)
        self.model = build_vla(cfg, device=device, seed=weight_seed)

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Memory with the episode's own noise generator."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        return EpisodeMemory(key=key, seed=seed, generator=gen)

    def dummy_action(self) -> np.ndarray:
        """Normalized zeros (the middle of the environment's action range)."""
        return np.zeros(self.cfg.action_dim, dtype=np.float32)

    def _images(self, items: Sequence[ActItem]) -> torch.Tensor:
        frames = np.stack([np.asarray(it.observation["image"]) for it in items])  # (B, H, W, 3) uint8
        x = torch.from_numpy(frames).to(self.device).permute(0, 3, 1, 2).float() / 255.0
        size = self.cfg.image_size
        if x.shape[-1] != size or x.shape[-2] != size:
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        return x

    def plan(self, items: Sequence[ActItem]) -> None:
        """The prefix caches of these episodes, in one batch; each episode keeps its own rows."""
        cfg = self.cfg
        toks = [instruction_tokens(str(it.observation.get("instruction", "")), cfg) for it in items]
        tokens = torch.tensor([t for t, _ in toks], device=self.device)
        mask = torch.arange(cfg.instruction_tokens, device=self.device)[None] < torch.tensor(
            [n for _, n in toks], device=self.device)[:, None]
        states = tuple(torch.from_numpy(np.stack([_state(it.observation.get(k, ()), cfg.state_dim) for it in items]))
                       .to(self.device) for k in ("state", "previous_state"))
        duration = torch.tensor([float(it.observation.get("time_s", 0.0)) for it in items], device=self.device)
        with torch.inference_mode():
            cache = self.model.prefix(self._images(items), tokens, mask, (states[0], states[1]), duration)
        for i, it in enumerate(items):
            it.memory.data["prefix_cache"] = cache.row(i)

    def needs_plan(self, item: ActItem) -> bool:
        """The prefix is computed once per episode."""
        return "prefix_cache" not in item.memory.data

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One action-expert call for every item: caches stacked, each episode's own noise."""
        caches: list[PrefixCache] = [it.memory.data["prefix_cache"] for it in items]
        noise = torch.stack([torch.randn(self.cfg.horizon, self.cfg.action_dim, generator=it.memory.generator,
                                         device=self.device) for it in items])
        with torch.inference_mode():
            actions = self.model.action_expert(noise, stack_caches(caches)).float().cpu().numpy()
        chunks: list[list[Any]] = []
        for i, it in enumerate(items):
            it.memory.trace.append(actions[i])
            chunks.append(list(actions[i, : self.execute_steps]))
        return chunks
