"""The action-expert call (``VlaModel.sample_actions``: prefix pass + every denoising step) replayed from CUDA
graphs, one graph per input shape (batch size, cameras), with an eager fallback where CUDA is absent.

On a GPU one eager call of the π0 shape is hundreds of small kernels, each launched from Python: at batch 1 the
launches, not the arithmetic, set the time (an H200 took 96–184 ms per call where reading the weights once allows
about 2.5 ms). A CUDA graph records the launches once and replays them in one go. The graph of a shape is captured
lazily, on the first call with that shape: the inputs are copied into static buffers, the call is warmed up three
times on a side stream (cuBLAS / SDPA pick their kernels, the allocator settles), then captured with
``torch.cuda.graph``; later calls copy into the buffers and replay. The capture's time is recorded on its own
(``captures``, ``take_setup_ns``), never inside a timed call. Each graph has its own memory pool, so one batch
size's replay never overwrites another's output; the output is cloned before the next call.

Modes: ``off`` (eager), ``on`` (CUDA graphs; refused off CUDA), ``auto`` (CUDA graphs on CUDA, else the eager
fallback, with the reason recorded). ``resolve_graph_mode`` decides; ``AeCallRunner`` runs the calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GRAPH_MODES", "AeCallRunner", "GraphCapture", "cuda_graph_of", "resolve_graph_mode"]

GRAPH_MODES = ("off", "on", "auto")
WARMUP_CALLS = 3  # side-stream calls before a capture (the PyTorch CUDA-graph recipe's warm-up)

AeInputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor,
                 torch.Tensor]


def resolve_graph_mode(requested: str, device: torch.device) -> tuple[str, str | None]:
    """``(mode, reason)``: ``cuda-graphs`` or ``eager``; ``reason`` says why a request for graphs runs eager.
    Raises ``ValueError`` for ``on`` off CUDA (the caller turns it into its one-line refusal)."""
    if requested not in GRAPH_MODES:
        raise ValueError(f"unknown CUDA-graph mode {requested!r}; use one of {', '.join(GRAPH_MODES)}")
    if requested == "off":
        return "eager", None
    if device.type == "cuda":
        return "cuda-graphs", None
    reason = f"CUDA graphs need a CUDA device; this run is on {device.type}"
    if requested == "on":
        raise ValueError(f"{reason}; use --device cuda on a GPU machine, or 'auto' for the eager fallback")
    return "eager", f"eager fallback: {reason}"


@dataclass
class GraphCapture:
    """One captured shape: batch size, cameras, warm-up and capture times (ms), replays so far."""

    batch_size: int
    cameras: int
    warmup_ms: float
    capture_ms: float
    replays: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "cameras": self.cameras, "warmup_ms": round(self.warmup_ms, 3),
                "capture_ms": round(self.capture_ms, 3), "replays": self.replays}


@dataclass
class _Graph:
    graph: Any
    inputs: list[torch.Tensor]
    output: torch.Tensor
    record: GraphCapture


def _flat(inputs: AeInputs) -> list[torch.Tensor]:
    images, tokens, mask, (start, end), duration, noise = inputs
    return [images, tokens, mask, start, end, duration, noise]


def _unflat(flat: list[torch.Tensor]) -> AeInputs:
    images, tokens, mask, start, end, duration, noise = flat
    return images, tokens, mask, (start, end), duration, noise


def cuda_graph_of(fn: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor, float]:
    """``fn`` (reading only static buffers) warmed up ``WARMUP_CALLS`` times on a side stream, then captured:
    ``(graph, its static output, warm-up ms)``; ``graph.replay()`` recomputes the output in place."""
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    warmup_ms = (time.perf_counter_ns() - t0) / 1e6
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = fn()
    torch.cuda.synchronize()
    return graph, output, warmup_ms


@dataclass
class AeCallRunner:
    """Runs ``model.sample_actions`` eagerly or from per-shape CUDA graphs (``mode`` from ``resolve_graph_mode``)."""

    model: Any
    mode: str = "eager"
    reason: str | None = None
    _graphs: dict[tuple[tuple[int, ...], ...], _Graph] = field(default_factory=dict)
    _setup_ns: int = 0

    def __call__(self, images: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor,
                 states: tuple[torch.Tensor, torch.Tensor], duration: torch.Tensor,
                 noise: torch.Tensor) -> torch.Tensor:
        """Actions ``(B, horizon, action_dim)`` for these inputs (the same as ``sample_actions``)."""
        inputs: AeInputs = (images, tokens, mask, states, duration, noise)
        if self.mode != "cuda-graphs":
            with torch.inference_mode():
                out: torch.Tensor = self.model.sample_actions(*inputs)
            return out
        flat = _flat(inputs)
        key = tuple(tuple(x.shape) for x in flat)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = self._capture(flat)
        with torch.inference_mode():
            for buf, x in zip(graph.inputs, flat, strict=True):
                buf.copy_(x)
            graph.graph.replay()
            graph.record.replays += 1
            return graph.output.clone()

    def _capture(self, flat: list[torch.Tensor]) -> _Graph:
        """Static buffers, then warm-up and capture (``cuda_graph_of``), timed outside any timed call."""
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            static = [x.detach().clone() for x in flat]
            graph, output, warmup_ms = cuda_graph_of(lambda: self.model.sample_actions(*_unflat(static)))
        spent = time.perf_counter_ns() - t0
        self._setup_ns += spent
        images = static[0]
        record = GraphCapture(int(images.shape[0]), int(images.shape[1]) if images.dim() == 5 else 1,
                              warmup_ms, spent / 1e6 - warmup_ms)
        return _Graph(graph, static, output, record)

    def take_setup_ns(self) -> int:
        """Nanoseconds spent capturing graphs since the last call of this method (then reset to 0)."""
        spent, self._setup_ns = self._setup_ns, 0
        return spent

    @property
    def captures(self) -> list[GraphCapture]:
        """Every captured shape, in capture order."""
        return [g.record for g in self._graphs.values()]

    def report(self) -> dict[str, Any]:
        """What run.json records: the mode, why graphs were not used (if asked for), each capture."""
        return {"mode": self.mode, "fallback_reason": self.reason,
                "captures": [c.as_dict() for c in self.captures] if self.mode == "cuda-graphs" else None}
