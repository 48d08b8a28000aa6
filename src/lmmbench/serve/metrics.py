"""Server-side metrics in the Prometheus text exposition format (written by hand, no client lib).

Gauges: waiting queue depth, running batch size, generated tokens per second over the last
``window_s`` seconds, memory in use and its peak. Counters: requests by finish reason, rejected
requests by reason, prompt and generated tokens, engine steps. Histograms: queue time, TTFT,
TPOT and end-to-end latency, in seconds.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from lmmbench.core.clock import now_ns
from lmmbench.engines.requests import GenerationOutput

__all__ = ["Histogram", "ServerMetrics"]

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """A cumulative-bucket histogram."""

    def __init__(self, name: str, help_: str, buckets: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.name, self.help, self.buckets = name, help_, buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.count += 1
        self.total += value
        for i, edge in enumerate(self.buckets):
            if value <= edge:
                self.counts[i] += 1

    def render(self) -> list[str]:
        """Exposition lines."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for edge, n in zip(self.buckets, self.counts, strict=True):
            lines.append(f'{self.name}_bucket{{le="{edge:g}"}} {n}')
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{self.name}_sum {self.total:.6f}")
        lines.append(f"{self.name}_count {self.count}")
        return lines


class ServerMetrics:
    """Everything ``/metrics`` shows; ``observe`` is fed every finished request."""

    def __init__(self, window_s: float = 10.0) -> None:
        self._lock = threading.Lock()
        self.window_ns = int(window_s * 1e9)
        self.finished: dict[str, int] = {}
        self.rejected: dict[str, int] = {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.queue = Histogram("lmmbench_request_queue_seconds", "Time from arrival to admission into the batch.")
        self.ttft = Histogram("lmmbench_time_to_first_token_seconds", "Time from arrival to the first token.")
        self.tpot = Histogram("lmmbench_time_per_output_token_seconds", "Mean time between output tokens.")
        self.e2e = Histogram("lmmbench_e2e_request_latency_seconds", "Time from arrival to the last token.")
        self._token_samples: deque[tuple[int, int]] = deque()

    def observe(self, output: GenerationOutput) -> None:
        """Record one finished request."""
        m = output.metrics
        with self._lock:
            self.finished[output.finish_reason] = self.finished.get(output.finish_reason, 0) + 1
            self.prompt_tokens += m.prompt_tokens
            self.generation_tokens += m.completion_tokens
            if output.finish_reason in ("stop", "length"):
                self.queue.observe(m.queue_ms / 1e3)
                self.ttft.observe(m.ttft_ms / 1e3)
                self.e2e.observe(m.e2e_ms / 1e3)
                if m.tpot_ms is not None:  # None for one token: no interval
                    self.tpot.observe(m.tpot_ms / 1e3)

    def reject(self, reason: str) -> None:
        """Count a request refused before it reached the engine (queue_full, bad_request, ...)."""
        with self._lock:
            self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def tokens_per_second(self, generated_total: int) -> float:
        """Generated tokens per second over the last window, from the engine's running total."""
        t = now_ns()
        with self._lock:
            self._token_samples.append((t, generated_total))
            while len(self._token_samples) > 2 and t - self._token_samples[1][0] >= self.window_ns:
                self._token_samples.popleft()
            t0, n0 = self._token_samples[0]
        return (generated_total - n0) / ((t - t0) / 1e9) if t > t0 else 0.0

    def render(
        self,
        waiting: int,
        running: int,
        generated_total: int,
        steps: int,
        memory_bytes: Callable[[], int],
        process_peak_memory_bytes: int | None,
    ) -> str:
        """The ``/metrics`` page."""
        tps = self.tokens_per_second(generated_total)
        lines: list[str] = []

        def gauge(name: str, help_: str, value: float, kind: str = "gauge") -> None:
            lines.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {value:g}"])

        gauge("lmmbench_queue_depth", "Requests waiting for a batch slot.", waiting)
        gauge("lmmbench_running_batch_size", "Requests in the running batch.", running)
        gauge("lmmbench_generation_tokens_per_second", "Generated tokens per second, recent window.", tps)
        gauge("lmmbench_process_memory_bytes", "This server process's memory in use (its CUDA allocator's on GPU, "
              "its resident set on CPU; not the whole device's).", memory_bytes())
        if process_peak_memory_bytes is not None:  # no forward yet: no sample, so no value (not 0)
            gauge("lmmbench_process_peak_memory_bytes", "Peak of lmmbench_process_memory_bytes read after engine "
                  "forwards.", process_peak_memory_bytes)
        gauge("lmmbench_engine_steps_total", "Engine steps run.", steps, "counter")
        with self._lock:
            gauge("lmmbench_prompt_tokens_total", "Prompt tokens of finished requests.", self.prompt_tokens, "counter")
            gauge(
                "lmmbench_generation_tokens_total", "Generated tokens of finished requests.",
                self.generation_tokens, "counter",
            )  # fmt: skip
            lines += ["# HELP lmmbench_requests_total Finished requests.", "# TYPE lmmbench_requests_total counter"]
            for reason in sorted(set(self.finished) | {"stop", "length"}):
                lines.append(f'lmmbench_requests_total{{finish_reason="{reason}"}} {self.finished.get(reason, 0)}')
            lines += [
                "# HELP lmmbench_requests_rejected_total Requests refused before the engine.",
                "# TYPE lmmbench_requests_rejected_total counter",
            ]
            for reason in sorted(set(self.rejected) | {"queue_full"}):
                lines.append(f'lmmbench_requests_rejected_total{{reason="{reason}"}} {self.rejected.get(reason, 0)}')
            for hist in (self.queue, self.ttft, self.tpot, self.e2e):
                lines.extend(hist.render())
        return "\n".join(lines) + "\n"
