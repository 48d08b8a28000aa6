"""The VLA-shaped policy as the episodic design runs it: a VLM planner with waypoints, then one action-expert
call per waypoint pair, each computing its prefix from the slot's current observation.

* ``plan`` (NEED_VLM) runs the PaliGemma-shaped planner (``models.vla_planner``) on the current observation —
  every camera, the instruction, the proprioception — and decodes its fixed number of generated tokens into
  ``k <= 7`` waypoints (proprioception targets with durations; tokens sampled from the episode's own generator,
  ``models.vla_planner`` says why). By default one slot per call (batch 1, one
  NEED_VLM slot after another, as the design has it); ``batched_planning=True`` plans every NEED_VLM slot of a
  tick in one left-padded batch (the design's next optimisation, not its method).
* ``act`` (NEED_AE) makes ONE ``sample_actions`` call for every slot that needs the action expert this tick:
  the prefix pass over each slot's CURRENT observation (every camera, the instruction tokens padded to 64 with a
  mask, the pair's start and end proprioception, its duration) and the 10 denoising steps reading that prefix,
  in the same batch. Nothing is cached across calls. Pair ``i`` runs from waypoint ``i - 1`` (the current
  proprioception for the first pair) to waypoint ``i``; its chunk (32 actions) executes the steps the pair's
  duration covers, then the next pair; after the last pair the slot replans.

On CUDA the policy runs in ``dtype`` (bfloat16 by default there: ``--dtype``); ``cuda_graphs`` (``off`` / ``on``
/ ``auto``) replays each action-expert call from a CUDA graph captured per batch size (``models.vla_graphs``:
``auto`` falls back to eager off CUDA and records why; ``on`` is refused there). A capture's time is reported by
``take_setup_ns`` so the scheduler keeps it out of the timed action calls.

Observations are dicts with the camera images (every key ending in ``image`` unless ``cameras`` names them:
``(H, W, 3)`` uint8), ``state`` and ``instruction`` (``episodes.envs.pusht`` makes them); the environment maps
normalized actions to its own units. Each episode's trace holds its raw action chunks (what the batched-vs-serial
comparison reads).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmmbench.episodes.protocols import ActItem, EpisodeKey, EpisodeMemory
from lmmbench.models.vla import VLA_SHAPES, VlaConfig, build_vla
from lmmbench.models.vla_graphs import AeCallRunner, resolve_graph_mode
from lmmbench.models.vla_planner import Waypoint, build_planner, decode_waypoints, planner_config

__all__ = ["CONTROL_PERIOD_S", "VlaPolicy", "instruction_tokens"]

CONTROL_PERIOD_S = 0.1  # the default control period: a waypoint pair of n steps lasts n x 0.1 s (Push-T's 10 Hz)


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
    """Planner + action expert with random weights (``shape`` one of ``models.vla.VLA_SHAPES``)."""

    def __init__(self, shape: str = "pi0-tiny", *, device: str = "cpu", weight_seed: int = 0,
                 planner_seed: int | None = None, num_layers: int | None = None,
                 cameras: Sequence[str] | None = None, batched_planning: bool = False,
                 dtype: torch.dtype = torch.float32, cuda_graphs: str = "off",
                 control_period_s: float = CONTROL_PERIOD_S) -> None:
        cfg = VLA_SHAPES[shape].with_layers(num_layers)
        self.cfg, self.name = cfg, cfg.name
        self.device, self.dtype = torch.device(device), dtype
        mode, reason = resolve_graph_mode(cuda_graphs, self.device)  # before the weights: a refusal costs nothing
        self.model = build_vla(cfg, device=device, dtype=dtype, seed=weight_seed)
        self.ae_call = AeCallRunner(self.model, mode, reason)
        self.planner_cfg = planner_config(cfg)
        self.planner = build_planner(self.planner_cfg, device=device,
                                     seed=weight_seed + 1 if planner_seed is None else planner_seed).to(dtype)
        self.cameras = tuple(cameras) if cameras else None
        self.batched_planning = batched_planning
        self.control_period_s = control_period_s  # the environment's (LIBERO 0.05 s): the action expert's duration

    def take_setup_ns(self) -> int:
        """One-off setup time spent inside ``act`` since the last call (CUDA-graph captures), for the scheduler
        to keep out of the timed action calls."""
        return self.ae_call.take_setup_ns()

    def new_episode(self, key: EpisodeKey, seed: int) -> EpisodeMemory:
        """Memory with the episode's own noise generator."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        return EpisodeMemory(key=key, seed=seed, generator=gen)

    def dummy_action(self) -> np.ndarray:
        """Normalized zeros (the middle of the environment's action range)."""
        return np.zeros(self.cfg.action_dim, dtype=np.float32)

    def camera_keys(self, observation: dict[str, Any]) -> tuple[str, ...]:
        """The cameras read: ``cameras`` when given, else every observation key ending in ``image``."""
        keys = self.cameras or tuple(sorted(k for k in observation if k.endswith("image")))
        missing = [k for k in keys if k not in observation]
        if not keys or missing:
            raise ValueError(f"the observation has no camera image {missing or '(no key ending in image)'}; "
                             f"its keys: {sorted(observation)}")
        return keys

    def _images(self, items: Sequence[ActItem]) -> torch.Tensor:
        """Every camera of every item, ``(B, C, 3, S, S)`` in 0..1, each resized to the shape's image size."""
        keys = self.camera_keys(items[0].observation)
        size = self.cfg.image_size
        per_camera = []
        for key in keys:
            frames = np.stack([np.asarray(it.observation[key]) for it in items])  # (B, H, W, 3) uint8
            x = torch.from_numpy(frames).to(self.device).permute(0, 3, 1, 2).float() / 255.0
            if x.shape[-1] != size or x.shape[-2] != size:
                x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
            per_camera.append(x)
        return torch.stack(per_camera, dim=1).to(self.dtype)

    def _proprio(self, item: ActItem) -> np.ndarray:
        return _state(item.observation.get("state", ()), self.cfg.state_dim)

    def plan(self, items: Sequence[ActItem]) -> None:
        """The planner on these slots' current observations (one call; one slot unless ``batched_planning``)."""
        cfg = self.cfg
        prompts = [instruction_tokens(str(it.observation.get("instruction", "")), cfg) for it in items]
        state = torch.from_numpy(np.stack([self._proprio(it) for it in items])).to(self.device, self.dtype)
        with torch.inference_mode():
            ids = self.planner.generate(self._images(items), [t[:n] for t, n in prompts], state,
                                        [it.memory.generator for it in items])
        for it, row in zip(items, ids, strict=True):
            waypoints = decode_waypoints(row, self.planner_cfg)
            it.memory.data.update(waypoints=waypoints, pair=0, plan_size=len(waypoints), plan_tokens=row)
            it.memory.data.setdefault("stat_waypoints", []).append(len(waypoints))

    def needs_plan(self, item: ActItem) -> bool:
        """Replan once the last waypoint pair's chunk is used up."""
        return int(item.memory.data.get("pair", 0)) >= len(item.memory.data.get("waypoints", []))

    def _pair(self, item: ActItem) -> tuple[np.ndarray, Waypoint]:
        """The start proprioception and the end waypoint of the item's next pair."""
        waypoints: list[Waypoint] = item.memory.data["waypoints"]
        i = int(item.memory.data["pair"])
        start = self._proprio(item) if i == 0 else waypoints[i - 1].state
        return start, waypoints[i]

    def act(self, items: Sequence[ActItem]) -> list[list[Any]]:
        """One ``sample_actions`` call for every item: fresh prefixes and the denoiser in one batch."""
        cfg = self.cfg
        pairs = [self._pair(it) for it in items]
        toks = [instruction_tokens(str(it.observation.get("instruction", "")), cfg) for it in items]
        tokens = torch.tensor([t for t, _ in toks], device=self.device)
        mask = torch.arange(cfg.instruction_tokens, device=self.device)[None] < torch.tensor(
            [n for _, n in toks], device=self.device)[:, None]
        start = torch.from_numpy(np.stack([s for s, _ in pairs])).to(self.device, self.dtype)
        end = torch.from_numpy(np.stack([w.state for _, w in pairs])).to(self.device, self.dtype)
        duration = torch.tensor([w.steps * self.control_period_s for _, w in pairs], device=self.device,
                                dtype=self.dtype)
        noise = torch.stack([torch.randn(cfg.horizon, cfg.action_dim, generator=it.memory.generator,
                                         device=self.device) for it in items]).to(self.dtype)
        actions = self.ae_call(self._images(items), tokens, mask, (start, end), duration,
                               noise).float().cpu().numpy()
        chunks: list[list[Any]] = []
        for i, (it, (_, wp)) in enumerate(zip(items, pairs, strict=True)):
            it.memory.trace.append(actions[i])
            it.memory.data["pair"] = int(it.memory.data["pair"]) + 1
            chunks.append(list(actions[i, : min(wp.steps, cfg.horizon)]))
        return chunks
