"""telemetry.png of a perf run: the load (requests in flight, from the records) next to what the server
reported (running / waiting, KV-cache usage, prefix-cache hit rate) and the local GPUs (NVML), on one
time axis (perf_counter seconds from the first telemetry sample)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lmmbench.core.request_records import RequestRecord

__all__ = ["in_flight_series", "plot_telemetry"]


def in_flight_series(records: list[RequestRecord]) -> tuple[list[int], list[int]]:
    """(perf_counter_ns instants, requests in flight just after each) from the sends and ends."""
    events = sorted([(r.sent_ns, 1) for r in records if r.sent_ns] + [(r.end_ns, -1) for r in records if r.end_ns])
    ts: list[int] = []
    counts: list[int] = []
    cur = 0
    for t, d in events:
        cur += d
        ts.append(t)
        counts.append(cur)
    return ts, counts


def _series(rows: list[dict[str, Any]], key: str, t0: int) -> tuple[list[float], list[float]]:
    pts = [((r["t_ns"] - t0) / 1e9, float(r[key])) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _gpu_series(rows: list[dict[str, Any]], key: str, t0: int) -> dict[int, tuple[list[float], list[float]]]:
    out: dict[int, tuple[list[float], list[float]]] = {}
    for r in rows:
        for g in r.get("gpus") or []:
            if g.get(key) is not None:
                xs, ys = out.setdefault(int(g["index"]), ([], []))
                xs.append((r["t_ns"] - t0) / 1e9)
                ys.append(float(g[key]))
    return out


def plot_telemetry(run_dir: Path, rows: list[dict[str, Any]], records: list[RequestRecord]) -> Path | None:
    """Write ``telemetry.png``; None when there is nothing to plot or no matplotlib."""
    if not rows:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    t0 = rows[0]["t_ns"]
    has_gpu = any(r.get("gpus") for r in rows)
    fig, axes = plt.subplots(3 if has_gpu else 2, 1, figsize=(10, 9 if has_gpu else 6.5), sharex=True)
    ts, counts = in_flight_series(records)
    load = axes[0]
    load.step([(t - t0) / 1e9 for t in ts], counts, where="post", label="in flight (client)", color="black")
    for key in ("running", "waiting"):
        xs, ys = _series(rows, key, t0)
        if xs:
            load.plot(xs, ys, "o-", ms=3, label=f"{key} (server)")
    load.set_ylabel("requests")
    cache = axes[1]
    for key in ("kv_cache_usage", "prefix_cache_hit_rate"):
        xs, ys = _series(rows, key, t0)
        if xs:
            cache.plot(xs, ys, "o-", ms=3, label=key.replace("_", " "))
    cache.set_ylabel("fraction")
    if has_gpu:
        gpu = axes[2]
        for key, label in (("util_gpu_pct", "util %"), ("power_w", "power W")):
            for idx, (xs, ys) in _gpu_series(rows, key, t0).items():
                gpu.plot(xs, ys, label=f"GPU{idx} {label}")
        gpu.set_ylabel("GPU")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[-1].set_xlabel("time (s)")
    server = next((r["server"] for r in rows if r.get("server")), "no server metrics")
    fig.suptitle(f"load and telemetry ({server})")
    fig.tight_layout()
    path = run_dir / "telemetry.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
