"""The toy waypoint policy: a planner and a flow-matching action expert, small enough for a CPU.

* Planner (per slot, like a VLA's vision-language planner): reads the image, lists the unvisited waypoints and
  proposes the next ``PLAN_AHEAD`` in greedy nearest-first order; when those are reached it is
  asked again.
* Action expert (one batched call per tick): a denoiser with seeded weights integrates a
  10-step flow (Euler, t = 0 .. 0.9) from Gaussian noise drawn from the episode's own
  ``torch.Generator``; the chunk of ``HORIZON`` actions is a scripted controller's moves toward
  the current waypoint plus ``NOISE_SCALE`` times the denoised sample, so episodes succeed or run
  out of steps depending on their noise. The first ``execute_steps`` actions of the chunk are
  executed (default 1: every executing slot joins every tick's batch).
* ``prefix_cache=True``: the denoiser attends over a prefix KV cache built once per call from the
  image (16 patch tokens) plus one task token whose K/V is computed on the episode's first call
  and kept in its memory. Prefix K/V are ``(B, heads, tokens, dim)``: episodes are isolated by
  the batch dimension, and the 10 denoising steps only read the cache (``cat`` with the action
  tokens' own K/V).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from lmmbench.episodes.envs.toy_waypoints import GRID
from lmmbench.episodes.protocols import ActItem, EpisodeKey, EpisodeMemory

__all__ = ["DENOISE_STEPS", "HORIZON", "ToyWaypointPolicy", "controller_chunks", "plan_waypoints"]

HORIZON = 4  # actions per chunk
DENOISE_STEPS = 10
NOISE_SCALE = 0.55
PLAN_AHEAD = 2
_COND = 6  # position, target, target - position (each / GRID)


def plan_waypoints(image: np.ndarray, position: np.ndarray, ahead: int = PLAN_AHEAD) -> list[tuple[int, int]]:
    """The next ``ahead`` unvisited waypoints seen in ``image``, greedy nearest first (ties by x, y)."""
    ys, xs = np.nonzero(image[1] > 0.5)
    left = sorted(zip(xs.tolist(), ys.tolist(), strict=True))
    here = (int(position[0]), int(position[1]))
    plan: list[tuple[int, int]] = []
    while left and len(plan) < ahead:
        nearest = min(left, key=lambda p: (max(abs(p[0] - here[0]), abs(p[1] - here[1])), p))
        left.remove(nearest)
        plan.append(nearest)
        here = nearest
    return plan


def controller_chunks(positions: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``HORIZON`` king moves per row from ``positions`` (B, 2) toward ``targets`` (B, 2); zeros once there."""
    out = np.zeros((positions.shape[0], HORIZON, 2), dtype=np.float64)
    p = positions.astype(np.int64)
    for h in range(HORIZON):
        move = np.clip(targets - p, -1, 1)
        out[:, h] = move
        p = p + move
    return out


class _MlpDenoiser(nn.Module):  # type: ignore[misc]
    """velocity(x_t, t, image, condition): image features once per call, an MLP per step."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.image = nn.Linear(3 * GRID * GRID, width)
        layers: list[nn.Module] = [nn.Linear(HORIZON * 2 + 1 + _COND + width, width), nn.SiLU()]
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.SiLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, HORIZON * 2)
        with torch.no_grad():
            self.head.weight.mul_(0.1)
            self.head.bias.zero_()

    def prefix(self, images: torch.Tensor, memories: Sequence[EpisodeMemory]) -> Any:
        del memories
        return torch.nn.functional.silu(self.image(images.flatten(1)))

    def velocity(self, x: torch.Tensor, t: float, prefix: Any, cond: torch.Tensor) -> torch.Tensor:
        tt = torch.full((x.shape[0], 1), t, dtype=x.dtype, device=x.device)
        h = self.body(torch.cat([x.flatten(1), tt, cond, prefix], dim=1))
        return self.head(h).view(-1, HORIZON, 2)


class _CachedDenoiser(nn.Module):  # type: ignore[misc]
    """Action tokens attend over a prefix KV cache (image patches + the episode's task token)."""

    def __init__(self, width: int, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.dim = heads, width // heads
        self.patch = nn.Linear(3 * 4 * 4, width)
        self.task = nn.Linear(GRID * GRID, width)
        self.prefix_kv = nn.Linear(width, 2 * width)
        self.token = nn.Linear(2 + 1 + _COND, width)
        self.slot = nn.Parameter(torch.randn(HORIZON, width) * 0.1)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU())
        self.head = nn.Linear(width, 2)
        with torch.no_grad():
            self.head.weight.mul_(0.1)
            self.head.bias.zero_()

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, W) -> (B, heads, T, dim)
        return x.view(x.shape[0], x.shape[1], self.heads, self.dim).transpose(1, 2)

    def _task_kv(self, memory: EpisodeMemory, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The task token's K/V, computed on the episode's first call and kept in its memory."""
        if "task_kv" not in memory.data:
            layout = image[1:2].flatten(1) + image[2:3].flatten(1)  # every waypoint, visited or not
            k, v = self.prefix_kv(torch.tanh(self.task(layout))).unsqueeze(1).chunk(2, dim=-1)
            memory.data["task_kv"] = (self._split(k)[0], self._split(v)[0])  # (heads, 1, dim)
            memory.data["stat_task_kv_builds"] = memory.data.get("stat_task_kv_builds", 0) + 1
        kv: tuple[torch.Tensor, torch.Tensor] = memory.data["task_kv"]
        return kv

    def prefix(self, images: torch.Tensor, memories: Sequence[EpisodeMemory]) -> Any:
        b = images.shape[0]
        patches = images.view(b, 3, 4, 4, 4, 4).permute(0, 2, 4, 1, 3, 5).reshape(b, 16, 48)
        k, v = self.prefix_kv(torch.tanh(self.patch(patches))).chunk(2, dim=-1)
        task = [self._task_kv(m, img) for m, img in zip(memories, images, strict=True)]
        task_k = torch.stack([kv[0] for kv in task])  # (B, heads, 1, dim): row i is episode i's
        task_v = torch.stack([kv[1] for kv in task])
        return torch.cat([task_k, self._split(k)], dim=2), torch.cat([task_v, self._split(v)], dim=2)

    def velocity(self, x: torch.Tensor, t: float, prefix: Any, cond: torch.Tensor) -> torch.Tensor:
        past_k, past_v = prefix
        b = x.shape[0]
        tt = torch.full((b, HORIZON, 1), t, dtype=x.dtype, device=x.device)
        tokens = self.token(torch.cat([x, tt, cond.unsqueeze(1).expand(b, HORIZON, _COND)], dim=2)) + self.slot
        q, k, v = (self._split(p) for p in self.qkv(tokens).chunk(3, dim=-1))
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)  # the cache is only read
        att = torch.softmax(q @ keys.transpose(-1, -2) / self.dim**0.5, dim=-1) @ values
        h = tokens + self.out(att.transpose(1, 2).reshape(b, HORIZON, -1))
        return self.head(h + self.mlp(h))


class ToyWaypointPolicy:
    """Planner + batched flow-matching action expert for ``toy-waypoints``."""

    batched_planning = False

    def __init__(self, *, device: str = "cpu", weight_seed: int = 0, width: int = 64, depth: int = 8,
                 execute_steps: int = 1, prefix_cache: bool = False) -> None:
        if not 1 <= execute_steps <= HORIZON:
            raise ValueError(f"execute_steps must be 1..{HORIZON}")
        self.name = "toy-prefix-cache" if prefix_cache else "toy"
        self.device = torch.device(device)
        self.execute_steps = execute_steps
        torch.manual_seed(weight_seed)  # seeded weights: every run builds the same network
        net: nn.Module = _CachedDenoiser(width) if prefix_cache else _MlpDenoiser(width, depth)
        self.net = net.to(self.device).eval()

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Memory with the episode's own noise generator."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        return EpisodeMemory(key=key, seed=seed, generator=gen)

    def dummy_action(self) -> np.ndarray:
        """Stand still."""
        return np.zeros(2, dtype=np.float64)

    def plan(self, items: Sequence[ActItem]) -> None:
        """Propose the next waypoints from each observation."""
        for item in items:
            item.memory.data["plan"] = plan_waypoints(item.observation["image"], item.observation["position"])

    def _current_target(self, item: ActItem) -> tuple[int, int] | None:
        plan: list[tuple[int, int]] = item.memory.data.get("plan", [])
        image = item.observation["image"]
        while plan and image[1, plan[0][1], plan[0][0]] < 0.5:  # reached (no longer unvisited)
            plan.pop(0)
        return plan[0] if plan else None

    def needs_plan(self, item: ActItem) -> bool:
        """Plan again once every planned waypoint is reached."""
        return self._current_target(item) is None

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One forward for every request: inputs stacked on dim 0, 10 denoising steps, split back."""
        with torch.inference_mode():
            return self._act(items)

    def _act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        targets = [self._current_target(it) for it in items]
        pos = np.stack([it.observation["position"] for it in items]).astype(np.int64)
        goal = np.array([t if t is not None else tuple(p) for t, p in zip(targets, pos.tolist(), strict=True)],
                        dtype=np.int64)
        images = torch.from_numpy(np.stack([it.observation["image"] for it in items])).to(self.device)
        p, g = pos.astype(np.float32) / GRID, goal.astype(np.float32) / GRID
        cond = torch.from_numpy(np.concatenate([p, g, g - p], axis=1)).to(self.device)
        noise = torch.stack([torch.randn(HORIZON, 2, generator=it.memory.generator, device=self.device)
                             for it in items])  # each episode's own numbers, whatever the batch
        prefix = self.net.prefix(images, [it.memory for it in items])
        x = noise
        for k in range(DENOISE_STEPS):
            x = x + self.net.velocity(x, k / DENOISE_STEPS, prefix, cond) / DENOISE_STEPS
        raw = controller_chunks(pos, goal) + NOISE_SCALE * x.double().cpu().numpy()
        chunks: list[list[Any]] = []
        for i, it in enumerate(items):
            it.memory.trace.append(raw[i])
            chunks.append(list(raw[i, : self.execute_steps]))
        return chunks
