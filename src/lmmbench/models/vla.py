"""A vision-language-action network shaped like π0: a PaliGemma-class prefix and a flow-matching action expert.

Widths and depths are π0's published ones (Black et al., "π0: A Vision-Language-Action Flow Model for
General Robot Control", 2024; openpi's ``pi0`` config): a SigLIP So400m/14 vision tower (width 1152, 27 layers,
MLP 4304, 16 heads) and a Gemma 2B decoder (width 2048, 18 layers, MLP 16384, 8 query heads sharing one
key/value head of 256, vocabulary 257,152) make the prefix; a Gemma-300M-shaped action expert (width 1024,
18 layers, MLP 4096, the same heads) makes the actions. Weights are random (fixed seed): timings and memory
are real, outputs are not a trained policy's.

One action-expert call (``VlaModel.sample_actions``, openpi's ``sample_actions``) is two passes in one batch:
a prefix pass over the observation — every camera's image ``(B, C, 3, 224, 224)``, instruction tokens ``(B, 64)``
with a mask, the waypoint pair's start and end proprioception ``(B, 32)`` each and its duration ``(B,)`` — into a
per-layer key/value cache (``PrefixCache``), then 10 Euler steps of the flow from Gaussian noise to actions
``(B, 32, 32)``; each action-expert layer attends over the cache of the prefix layer at the same depth plus the
action tokens' own keys and values, and only reads the cache. Nothing is kept between calls: every call computes
its prefix from the observation it is given. Episodes are isolated by the batch dimension; instruction padding is
masked out of every attention. No rotary position embedding: it changes no tensor shape and a negligible share
of the work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

__all__ = [
    "PI0", "VLA_SHAPES", "ActionExpert", "PrefixCache", "PrefixEncoder", "VisionTower", "VlaConfig", "VlaModel",
    "build_vla", "count_vla_parameters",
]


@dataclass(frozen=True)
class VlaConfig:
    """The shape of a VLA network (π0's numbers by default)."""

    name: str = "pi0"
    source: str = ("π0 (Black et al. 2024, arXiv:2410.24164) and openpi's pi0 config: PaliGemma 3B "
                   "(SigLIP So400m/14 + Gemma 2B) with a Gemma-300M-shaped action expert")
    published_params_b: float | None = 3.3
    image_size: int = 224
    patch: int = 14
    vision_width: int = 1152
    vision_layers: int = 27
    vision_mlp: int = 4304
    vision_heads: int = 16
    width: int = 2048
    layers: int = 18
    mlp: int = 16384
    heads: int = 8
    kv_heads: int = 1
    head_dim: int = 256
    vocab: int = 257_152
    expert_width: int = 1024
    expert_mlp: int = 4096
    instruction_tokens: int = 64
    state_dim: int = 32
    horizon: int = 32
    action_dim: int = 32
    denoise_steps: int = 10

    def with_layers(self, num_layers: int | None) -> VlaConfig:
        """Every tower cut to ``num_layers`` (the widths and the vocabulary stay)."""
        if not num_layers:
            return self
        return replace(self, name=f"{self.name}-L{num_layers}", vision_layers=min(num_layers, self.vision_layers),
                       layers=min(num_layers, self.layers))

    @property
    def image_tokens(self) -> int:
        return (self.image_size // self.patch) ** 2

    def prefix_tokens(self, cameras: int = 1) -> int:
        """Image tokens of every camera + instruction tokens + two proprioception tokens + the duration token."""
        return cameras * self.image_tokens + self.instruction_tokens + 3


PI0 = VlaConfig()
#: CPU-sized variants, vocabulary cut to 4,096 / 512 (the full embedding alone is 2 GB in float32):
#: ``pi0-small`` keeps π0's depths and 224-pixel images with every width / 16 (the speed-up benchmark);
#: ``pi0-tiny`` has 2 layers, 112-pixel images and every width / 16 (tests).
PI0_SMALL = replace(PI0, name="pi0-small", published_params_b=None,
                    source="pi0 with every width / 16, vocabulary 4096",
                    vision_width=72, vision_mlp=269, vision_heads=2, width=128, mlp=1024, head_dim=16,
                    vocab=4096, expert_width=64, expert_mlp=256)
PI0_TINY = replace(PI0_SMALL, name="pi0-tiny", image_size=112, vision_layers=2, layers=2, vocab=512,
                   source="pi0 with every width / 16, 2 layers, 112-pixel images, vocabulary 512")
VLA_SHAPES: dict[str, VlaConfig] = {c.name: c for c in (PI0, PI0_SMALL, PI0_TINY)}


class _RmsNorm(nn.Module):  # type: ignore[misc]
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + 1e-6) * (1.0 + self.weight)


class _GatedMlp(nn.Module):  # type: ignore[misc]
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.gate(x), approximate="tanh") * self.up(x))


class _VisionBlock(nn.Module):  # type: ignore[misc]
    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__()
        w = cfg.vision_width
        self.norm1, self.norm2 = nn.LayerNorm(w), nn.LayerNorm(w)
        self.attn = nn.MultiheadAttention(w, cfg.vision_heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(w, cfg.vision_mlp), nn.GELU(approximate="tanh"),
                                 nn.Linear(cfg.vision_mlp, w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTower(nn.Module):  # type: ignore[misc]
    """SigLIP-style: patch embedding, learned positions, pre-norm blocks, then a projection to the decoder."""

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, cfg.vision_width, cfg.patch, stride=cfg.patch)
        self.position = nn.Parameter(torch.randn(cfg.image_tokens, cfg.vision_width) * 0.02)
        self.blocks = nn.ModuleList(_VisionBlock(cfg) for _ in range(cfg.vision_layers))
        self.norm = nn.LayerNorm(cfg.vision_width)
        self.project = nn.Linear(cfg.vision_width, cfg.width)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.project(self.norm(x))
        return out


class _Attention(nn.Module):  # type: ignore[misc]
    """Multi-query attention projections (``heads`` queries, ``kv_heads`` shared keys / values)."""

    def __init__(self, width: int, cfg: VlaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(width, cfg.heads * cfg.head_dim, bias=False)
        self.k = nn.Linear(width, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v = nn.Linear(width, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o = nn.Linear(cfg.heads * cfg.head_dim, width, bias=False)

    def split(self, x: torch.Tensor, heads: int) -> torch.Tensor:  # (B, T, h*d) -> (B, h, T, d)
        return x.view(x.shape[0], x.shape[1], heads, self.cfg.head_dim).transpose(1, 2)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """Queries ``(B, heads, T_q, d)`` over keys ``(B, kv_heads, T_k, d)`` whose ``key_mask`` (B, T_k) is True.

        The query heads of one key/value head are folded into its query rows, so the shared keys and values
        are read in place, never copied per head.
        """
        b, heads, t_q, d = q.shape
        kv = self.cfg.kv_heads
        folded = q.reshape(b, kv, heads // kv * t_q, d)
        out = nn.functional.scaled_dot_product_attention(folded, k, v, attn_mask=key_mask[:, None, None, :])
        out = out.view(b, heads, t_q, d)
        return self.o(out.transpose(1, 2).reshape(b, t_q, heads * d))


class _DecoderLayer(nn.Module):  # type: ignore[misc]
    def __init__(self, width: int, hidden: int, cfg: VlaConfig) -> None:
        super().__init__()
        self.norm1, self.norm2 = _RmsNorm(width), _RmsNorm(width)
        self.attn = _Attention(width, cfg)
        self.mlp = _GatedMlp(width, hidden)


@dataclass
class PrefixCache:
    """Per decoder layer, the prefix's keys and values ``(B, kv_heads, T, head_dim)`` and the key mask ``(B, T)``."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor


class PrefixEncoder(nn.Module):  # type: ignore[misc]
    """Image, instruction, proprioception and duration tokens through the Gemma-style decoder, into a cache."""

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.vision = VisionTower(cfg)
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.state = nn.ModuleList(nn.Linear(cfg.state_dim, cfg.width) for _ in range(2))
        self.duration = nn.Linear(1, cfg.width)
        self.layers = nn.ModuleList(_DecoderLayer(cfg.width, cfg.mlp, cfg) for _ in range(cfg.layers))

    def forward(self, images: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor,
                states: tuple[torch.Tensor, torch.Tensor], duration: torch.Tensor) -> PrefixCache:
        """The cache of a batch. ``images`` is ``(B, C, 3, H, W)`` (C cameras, each through the same vision
        tower) or ``(B, 3, H, W)``; ``states`` the pair's start and end proprioception; instruction padding
        (``token_mask`` False) is masked out of every key set."""
        if images.dim() == 4:
            images = images[:, None]
        b, cams = images.shape[:2]
        seen = self.vision(images.flatten(0, 1)).view(b, cams * self.cfg.image_tokens, self.cfg.width)
        x = torch.cat([seen, self.embed(tokens) * math.sqrt(self.cfg.width),
                       self.state[0](states[0])[:, None], self.state[1](states[1])[:, None],
                       self.duration(duration[:, None])[:, None]], dim=1)
        ones = torch.ones(b, seen.shape[1], dtype=torch.bool, device=images.device)
        mask = torch.cat([ones, token_mask, ones[:, :3]], dim=1)
        keys, values = [], []
        for layer in self.layers:
            h = layer.norm1(x)
            q = layer.attn.split(layer.attn.q(h), self.cfg.heads)
            k = layer.attn.split(layer.attn.k(h), self.cfg.kv_heads)
            v = layer.attn.split(layer.attn.v(h), self.cfg.kv_heads)
            keys.append(k)
            values.append(v)
            x = x + layer.attn.attend(q, k, v, mask)
            x = x + layer.mlp(layer.norm2(x))
        return PrefixCache(keys, values, mask)


class ActionExpert(nn.Module):  # type: ignore[misc]
    """Flow matching over the prefix cache: one call integrates every denoising step for the whole batch."""

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        w = cfg.expert_width
        self.action_in = nn.Linear(cfg.action_dim, w)
        self.time_mlp = nn.Sequential(nn.Linear(2 * w, w), nn.SiLU(), nn.Linear(w, w))
        self.layers = nn.ModuleList(_DecoderLayer(w, cfg.expert_mlp, cfg) for _ in range(cfg.layers))
        self.norm = _RmsNorm(w)
        self.action_out = nn.Linear(w, cfg.action_dim)

    def _time(self, t: float, b: int, like: torch.Tensor) -> torch.Tensor:
        half = self.cfg.expert_width // 2
        freq = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=like.dtype, device=like.device) / half)
        emb = torch.cat([torch.sin(t * freq), torch.cos(t * freq)])
        return emb.expand(b, self.cfg.horizon, -1)

    def velocity(self, x: torch.Tensor, t: float, cache: PrefixCache) -> torch.Tensor:
        """The flow's velocity at time ``t`` for noisy actions ``x`` (B, horizon, action_dim)."""
        b = x.shape[0]
        h = self.time_mlp(torch.cat([self.action_in(x), self._time(t, b, x)], dim=-1))
        own = torch.ones(b, self.cfg.horizon, dtype=torch.bool, device=x.device)
        mask = torch.cat([cache.mask, own], dim=1)
        for j, layer in enumerate(self.layers):
            z = layer.norm1(h)
            q = layer.attn.split(layer.attn.q(z), self.cfg.heads)
            k = torch.cat([cache.keys[j], layer.attn.split(layer.attn.k(z), self.cfg.kv_heads)], dim=2)
            v = torch.cat([cache.values[j], layer.attn.split(layer.attn.v(z), self.cfg.kv_heads)], dim=2)
            h = h + layer.attn.attend(q, k, v, mask)
            h = h + layer.mlp(layer.norm2(h))
        out: torch.Tensor = self.action_out(self.norm(h))
        return out

    def forward(self, noise: torch.Tensor, cache: PrefixCache) -> torch.Tensor:
        """Euler integration from noise (t = 1) to actions (t = 0) in ``denoise_steps`` steps."""
        x, steps = noise, self.cfg.denoise_steps
        for i in range(steps):
            x = x - self.velocity(x, 1.0 - i / steps, cache) / steps
        return x


class VlaModel(nn.Module):  # type: ignore[misc]
    """The prefix encoder and the action expert of one VLA shape."""

    def __init__(self, cfg: VlaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.prefix = PrefixEncoder(cfg)
        self.action_expert = ActionExpert(cfg)

    def sample_actions(self, images: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor,
                       states: tuple[torch.Tensor, torch.Tensor], duration: torch.Tensor,
                       noise: torch.Tensor) -> torch.Tensor:
        """One action-expert call as the episodic design makes it: the prefix pass over this observation, then
        the denoising steps reading that prefix's cache; ``(B, horizon, action_dim)`` normalized actions."""
        return self.action_expert(noise, self.prefix(images, tokens, token_mask, states, duration))


def count_vla_parameters(cfg: VlaConfig) -> int:
    """Parameters of the shape, counted on the meta device (no memory is allocated)."""
    with torch.device("meta"):
        model = VlaModel(cfg)
    return int(sum(p.numel() for p in model.parameters()))


def build_vla(cfg: VlaConfig, device: str = "cpu", dtype: Any = None, seed: int = 0) -> VlaModel:
    """Random weights from ``seed``, built on ``device`` in ``dtype`` (float32 unless given), in eval mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = VlaModel(cfg)
    if dtype is not None:
        model.to(dtype)
    model.eval()
    return model
