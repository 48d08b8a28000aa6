"""Time the action-expert call of a VLA shape at several batch sizes, eager and from CUDA graphs, against the
call's memory-traffic bound (``benchmarks/gpu_check.py``'s pi0 check).

The memory-traffic bound of one call is the bytes it must read from device memory divided by the card's
bandwidth: every prefix weight once (the vision tower, the decoder layers, the projections; of the vocabulary
embedding only the rows of the batch's instruction tokens), the action expert's weights once per denoising step
(10 steps; 600 MB in bf16 at π0's shape, far beyond any cache), and the prefix's keys and values once per
denoising step and expert layer (each step's attention reads the whole prefix cache). Activations are left out,
so this is a floor: ``ratio_to_bound`` = measured ms / bound ms says how far a call is from it.
"""

from __future__ import annotations

import re
import statistics
import time
from typing import Any

import torch

from lmmbench.models.vla import VlaConfig, VlaModel, build_vla
from lmmbench.models.vla_graphs import AeCallRunner

__all__ = ["CARD_BANDWIDTH_TB_S", "ae_call_inputs", "ae_traffic_bytes", "card_bandwidth_tb_s", "time_ae_calls"]

#: Peak memory bandwidth (TB/s) of the cards named, from the vendors' data sheets; matched against
#: ``torch.cuda.get_device_name`` in order. Any other card needs the bandwidth given by hand.
CARD_BANDWIDTH_TB_S: tuple[tuple[str, str, float], ...] = (
    (r"H200", "NVIDIA H200 (HBM3e)", 4.8),
    (r"H100.*(SXM|HBM3)", "NVIDIA H100 SXM (HBM3)", 3.35),
    (r"A100.*80GB", "NVIDIA A100 80GB", 2.0),
)


def card_bandwidth_tb_s(device_name: str) -> float | None:
    """The table's bandwidth for a device name (``torch.cuda.get_device_name``), or None when it is not there."""
    for pattern, _, tb_s in CARD_BANDWIDTH_TB_S:
        if re.search(pattern, device_name):
            return tb_s
    return None


def _params(module: torch.nn.Module) -> int:
    return int(sum(p.numel() for p in module.parameters()))


def ae_traffic_bytes(model: VlaModel, batch: int, cameras: int, dtype_bytes: int) -> dict[str, int]:
    """Bytes one call must read (module docstring): ``weights`` and ``kv`` (the prefix cache read by every step)."""
    cfg: VlaConfig = model.cfg
    prefix_weights = _params(model.prefix) - model.prefix.embed.weight.numel()
    embed_rows = batch * cfg.instruction_tokens * cfg.width
    expert = _params(model.action_expert)
    kv_per_read = 2 * batch * cfg.kv_heads * cfg.prefix_tokens(cameras) * cfg.head_dim * cfg.layers
    return {"weights": dtype_bytes * (prefix_weights + embed_rows + cfg.denoise_steps * expert),
            "kv": dtype_bytes * cfg.denoise_steps * kv_per_read}


def ae_call_inputs(cfg: VlaConfig, batch: int, cameras: int, device: torch.device, dtype: torch.dtype,
                   seed: int = 0) -> tuple[Any, ...]:
    """Random inputs of one call: images, instruction tokens (10 real, the rest padding), mask, states,
    duration, noise."""
    gen = torch.Generator().manual_seed(seed + batch)
    size, n = cfg.image_size, cfg.instruction_tokens
    images = torch.rand(batch, cameras, 3, size, size, generator=gen)
    tokens = torch.randint(1, cfg.vocab, (batch, n), generator=gen)
    mask = torch.arange(n)[None].expand(batch, n) < 10
    start, end = torch.rand(batch, cfg.state_dim, generator=gen), torch.rand(batch, cfg.state_dim, generator=gen)
    duration = torch.full((batch,), 1.6)
    noise = torch.randn(batch, cfg.horizon, cfg.action_dim, generator=gen)
    floats = [x.to(device, dtype) for x in (images, start, end, duration, noise)]
    return floats[0], tokens.to(device), mask.to(device), (floats[1], floats[2]), floats[3], floats[4]


def _timed_ms(run: Any, inputs: tuple[Any, ...], cuda: bool) -> tuple[float, torch.Tensor]:
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    out = run(*inputs)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter_ns() - t0) / 1e6, out


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def time_ae_calls(cfg: VlaConfig, sizes: list[int], *, device: str = "cuda", dtype: torch.dtype = torch.bfloat16,
                  repeats: int = 10, graphs: bool = True, cameras: int = 1,
                  bandwidth_tb_s: float | None = None) -> list[dict[str, Any]]:
    """Per batch size: eager and graphed ms per call (median, min, max of ``repeats`` interleaved calls after one
    warm-up each), the capture's own time, the speed-up, max |graphed - eager| on the same inputs, the traffic
    bound and the ratio to it (None without a bandwidth). ``graphs`` needs CUDA."""
    dev = torch.device(device)
    model = build_vla(cfg, device=device, dtype=dtype)
    eager = AeCallRunner(model, "eager")
    graphed = AeCallRunner(model, "cuda-graphs") if graphs else None
    cuda = dev.type == "cuda"
    rows = []
    for b in sizes:
        inputs = ae_call_inputs(cfg, b, cameras, dev, dtype)
        times: dict[str, list[float]] = {"eager": [], "graphed": []}
        _, ref = _timed_ms(eager, inputs, cuda)  # warm-up
        diff = capture = None
        if graphed is not None:
            _, out = _timed_ms(graphed, inputs, cuda)  # captures (timed apart by the runner)
            capture = graphed.captures[-1].capture_ms + graphed.captures[-1].warmup_ms
            diff = float((out.float() - ref.float()).abs().max())
        for _ in range(repeats):
            times["eager"].append(_timed_ms(eager, inputs, cuda)[0])
            if graphed is not None:
                times["graphed"].append(_timed_ms(graphed, inputs, cuda)[0])
        traffic = ae_traffic_bytes(model, b, cameras, torch.finfo(dtype).bits // 8)
        bound = (traffic["weights"] + traffic["kv"]) / (bandwidth_tb_s * 1e12) * 1e3 if bandwidth_tb_s else None
        e, g = _spread(times["eager"]), _spread(times["graphed"])
        rows.append({"batch_size": b, "eager_ms": e, "graphed_ms": g, "graph_setup_ms": capture,
                     "speedup": e["median"] / g["median"] if e["median"] and g["median"] else None,
                     "max_abs_diff": diff, "weight_bytes": traffic["weights"], "kv_bytes": traffic["kv"],
                     "bound_ms": bound,
                     "eager_ratio_to_bound": e["median"] / bound if bound and e["median"] else None,
                     "graphed_ratio_to_bound": g["median"] / bound if bound and g["median"] else None})
    return rows
