"""A PaliGemma-shaped waypoint planner: the vision-language model that plans before the action expert acts.

The episodic design's robot policy has two models: a VLM that, at every replan, generates up to 7 waypoints
autoregressively (batch 1, one episode after another), and the action expert (``models.vla``) called once per
waypoint pair. This module is the VLM: PaliGemma 3B's shape (a SigLIP So400m/14-style vision tower and a
Gemma-2B-style decoder, the widths of ``VlaConfig``, so the CPU cuts of ``models.vla`` cut it the same way) with
random weights from a fixed seed. The prompt — every camera's image tokens, the instruction and one
proprioception token — is read with full (prefix-LM) attention; then ``generated_tokens`` tokens are decoded one
per forward, each reading and extending a per-layer key/value cache. With random weights the logits are nearly
flat and their argmax hardly depends on the prompt (every episode would get the same plan), so the policy samples
at temperature 1 from each episode's own generator: plans differ between episodes and replans, and an episode's
plans depend on its seed only. The language-model head is untied (random, like the rest): a tied head makes a
random decoder repeat its last token forever.

The token layout (``decode_waypoints``): the first token gives the waypoint count ``k = 1 + id mod 7``; then, for
each of 7 waypoint places, ``state_tokens`` value tokens (``(id mod 256) / 255``, a proprioception target in
0..1) and one duration token (``1 + id mod 32`` control steps). Only the first ``k`` places are used, but every
replan generates the same number of tokens, as a fine-tuned planner emitting a fixed-format answer does.
Weights are random: the waypoints are not a trained planner's, the timings and token counts are real.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lmmbench.models.vla import VisionTower, VlaConfig, _DecoderLayer, _RmsNorm

__all__ = ["PaliGemmaPlanner", "PlannerConfig", "Waypoint", "build_planner", "decode_waypoints", "planner_config"]

MAX_WAYPOINTS = 7  # "每次 replan 最多调用 7 次（waypoint 数）"
VALUE_BINS = 256


@dataclass(frozen=True)
class PlannerConfig:
    """The planner's shape: PaliGemma's widths (those of ``vla``) and its output format."""

    name: str
    vla: VlaConfig
    state_tokens: int  # proprioception values per waypoint (LIBERO's proprioception has 8)
    max_waypoints: int = MAX_WAYPOINTS
    max_duration_steps: int = 32  # the action chunk's horizon

    @property
    def generated_tokens(self) -> int:
        """Tokens generated per replan: the count, then (values + duration) per waypoint place."""
        return 1 + self.max_waypoints * (self.state_tokens + 1)


def planner_config(vla: VlaConfig) -> PlannerConfig:
    """The planner beside the VLA shape ``vla``: PaliGemma 3B for ``pi0``, the same cuts for the CPU shapes
    (2 proprioception values per waypoint for ``pi0-tiny``, Push-T's agent position)."""
    tiny = vla.name.startswith("pi0-tiny")
    name = "paligemma-3b" + vla.name.removeprefix("pi0")
    return PlannerConfig(name=name, vla=vla, state_tokens=2 if tiny else 8)


@dataclass
class Waypoint:
    """One decoded waypoint: the proprioception target (``state_dim`` values, zeros past the decoded ones) and
    how many control steps the pair that ends at it lasts."""

    state: np.ndarray
    steps: int


def decode_waypoints(ids: list[int], cfg: PlannerConfig) -> list[Waypoint]:
    """The ``k`` waypoints that one replan's generated token ids encode (layout in the module docstring)."""
    if len(ids) != cfg.generated_tokens:
        raise ValueError(f"expected {cfg.generated_tokens} generated tokens, got {len(ids)}")
    k = 1 + ids[0] % cfg.max_waypoints
    per = cfg.state_tokens + 1
    out: list[Waypoint] = []
    for j in range(k):
        place = ids[1 + j * per: 1 + (j + 1) * per]
        state = np.zeros(cfg.vla.state_dim, dtype=np.float32)
        state[: cfg.state_tokens] = [(t % VALUE_BINS) / (VALUE_BINS - 1) for t in place[:-1]]
        out.append(Waypoint(state, 1 + place[-1] % cfg.max_duration_steps))
    return out


class PaliGemmaPlanner(nn.Module):  # type: ignore[misc]
    """SigLIP-style vision tower + Gemma-style decoder with a tied head; greedy generation with a KV cache."""

    def __init__(self, cfg: PlannerConfig) -> None:
        super().__init__()
        v = cfg.vla
        self.cfg = cfg
        self.vision = VisionTower(v)
        self.embed = nn.Embedding(v.vocab, v.width)
        self.state = nn.Linear(v.state_dim, v.width)
        self.layers = nn.ModuleList(_DecoderLayer(v.width, v.mlp, v) for _ in range(v.layers))
        self.norm = _RmsNorm(v.width)
        self.head = nn.Linear(v.width, v.vocab, bias=False)

    def _layers(self, x: torch.Tensor, mask: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]] | None,
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """``x`` through every layer; its keys / values are appended to ``cache`` (all of ``mask``'s keys)."""
        v = self.cfg.vla
        out: list[tuple[torch.Tensor, torch.Tensor]] = []
        for j, layer in enumerate(self.layers):
            h = layer.norm1(x)
            q = layer.attn.split(layer.attn.q(h), v.heads)
            k = layer.attn.split(layer.attn.k(h), v.kv_heads)
            val = layer.attn.split(layer.attn.v(h), v.kv_heads)
            if cache is not None:
                k, val = torch.cat([cache[j][0], k], dim=2), torch.cat([cache[j][1], val], dim=2)
            out.append((k, val))
            x = x + layer.attn.attend(q, k, val, mask)
            x = x + layer.mlp(layer.norm2(x))
        return x, out

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.norm(x[:, -1]))
        return out

    def forward(self, prompt: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The prompt pass (prefill): next-token logits and the cache; ``prompt`` is embeddings ``(B, T, W)``."""
        x, cache = self._layers(prompt, mask, None)
        return self._logits(x), cache

    def embed_prompt(self, images: torch.Tensor, prompts: list[list[int]], state: torch.Tensor,
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings of each row's prompt — images ``(B, C, 3, H, W)``, its instruction tokens (no padding),
        its proprioception — left-padded to the longest row, and the mask of real positions."""
        v = self.cfg.vla
        b, cams = images.shape[:2]
        seen = self.vision(images.flatten(0, 1)).view(b, cams * v.image_tokens, v.width)
        rows = []
        for i, ids in enumerate(prompts):
            text = self.embed(torch.tensor(ids, dtype=torch.long, device=images.device)) * math.sqrt(v.width)
            rows.append(torch.cat([seen[i], text, self.state(state[i])[None]]))
        longest = max(r.shape[0] for r in rows)
        x = torch.stack([nn.functional.pad(r, (0, 0, longest - r.shape[0], 0)) for r in rows])
        mask = torch.stack([torch.arange(longest, device=x.device) >= longest - r.shape[0] for r in rows])
        return x, mask

    def generate(self, images: torch.Tensor, prompts: list[list[int]], state: torch.Tensor,
                 generators: list[torch.Generator] | None = None) -> list[list[int]]:
        """``generated_tokens`` tokens per row (rows left-padded when more than one): sampled at temperature 1
        with row ``i``'s own generator when ``generators`` are given, else greedy."""
        x, mask = self.embed_prompt(images, prompts, state)
        logits, cache = self(x, mask)
        out = []
        for step in range(self.cfg.generated_tokens):
            token = logits.argmax(-1) if generators is None else _sample(logits, generators)
            out.append(token)
            if step + 1 == self.cfg.generated_tokens:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            h, cache = self._layers(self.embed(token)[:, None] * math.sqrt(self.cfg.vla.width), mask, cache)
            logits = self._logits(h)
        return torch.stack(out, dim=1).tolist()  # type: ignore[no-any-return]


def _sample(logits: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row from softmax(logits), each row with its own generator (its episode's numbers)."""
    probs = torch.softmax(logits.float(), dim=-1)
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(generators)])


def build_planner(cfg: PlannerConfig, device: str = "cpu", seed: int = 1) -> PaliGemmaPlanner:
    """Random weights from ``seed`` on ``device``, in eval mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = PaliGemmaPlanner(cfg)
    model.eval()
    return model
