"""``lmmbench perf --models NAME=URL,NAME=URL``: the same load points against several endpoints, as AISBench's
``--models`` runs several model configs: one run folder per model (``<out-dir>/perf/<run-name>-<NAME>/``, or
``<NAME>`` without ``--run-name``) and one comparison table of every point of every model
(``<out-dir>/perf/<run-name or models>_comparison.csv``, printed too)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

from lmmbench.config.perf.options import PerfConfig
from lmmbench.core.errors import UserError

__all__ = ["COMPARISON_COLUMNS", "run_models"]

#: the comparison table's columns after model and point (those a run's summary.csv has)
COMPARISON_COLUMNS = ("rate", "concurrency", "requests", "ok", "qps", "output_token_throughput", "ttft_ms_p50",
                      "ttft_ms_p99", "tpot_ms_mean", "e2e_ms_p50", "goodput_qps", "accuracy", "accuracy_ci_low",
                      "accuracy_ci_high", "accuracy_over_answered", "accuracy_requests_failed", "correct_goodput_qps",
                      "accuracy_changed")  # fmt: skip


def run_models(cfg: PerfConfig) -> list[Any]:
    """Run ``cfg``'s points against every ``--models`` endpoint in turn; returns the ``PerfRun`` of each."""
    from lmmbench.sessions.perf.session import run_perf

    if "url" in cfg.model_fields_set:
        raise UserError("--models gives every endpoint's URL: drop --url")
    if cfg.action != "run" or cfg.resume:
        raise UserError("--models runs fresh load tests: not with perf search / recover or --resume")
    table = cfg.out_dir / "perf" / f"{cfg.run_name or 'models'}_comparison.csv"
    if table.exists() and not cfg.overwrite:
        raise UserError(f"{table} exists: give a fresh --out-dir or --run-name (or --overwrite)")
    _check_every_model(cfg)
    runs, rows = [], []
    for name, url in cfg.models.items():
        run_name = f"{cfg.run_name}-{name}" if cfg.run_name else name
        print(f"[perf] model {name}: {url}", file=sys.stderr)
        run = run_perf(cfg.model_copy(update={"url": url, "models": {}, "run_name": run_name}))
        runs.append(run)
        rows += [{"model": name, "run_dir": str(run.run_dir), **r} for r in _summary(run.run_dir)]
    _write(table, rows)
    _print(rows)
    print(f"[perf] comparison of {len(runs)} models: {table}", file=sys.stderr)
    return runs


def _check_every_model(cfg: PerfConfig) -> None:
    """Every ``--models`` entry a well-formed URL whose server answers (and serves ``--model`` when given),
    before the first model is measured."""
    from lmmbench.backends.openai_http import parse_base_url
    from lmmbench.backends.readiness import wait_for_server

    if cfg.server_cmd is not None:  # each server is started by the run
        return
    for name, url in cfg.models.items():
        try:
            parse_base_url(url)
            wait_for_server(url, cfg.model, cfg.wait_for_server, api_key=cfg.api_key)
        except UserError as exc:
            raise UserError(f"--models {name}: {exc}") from None


def _summary(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "summary.csv"
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    cols = ["model", "point", *(c for c in COMPARISON_COLUMNS if any(r.get(c) not in (None, "") for r in rows)),
            "run_dir"]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _print(rows: list[dict[str, Any]]) -> None:
    cols = ["model", "point", "rate", "concurrency", "qps", "ttft_ms_p50", "tpot_ms_mean", "accuracy"]
    cols = [c for c in cols if any(r.get(c) not in (None, "") for r in rows)]
    print("  ".join(f"{c:>12}" for c in cols), file=sys.stderr)
    for r in rows:
        print("  ".join(f"{_short(r.get(c)):>12}" for c in cols), file=sys.stderr)


def _short(v: Any) -> str:
    try:
        return f"{float(v):.4g}"
    except (TypeError, ValueError):
        return str(v or "")
