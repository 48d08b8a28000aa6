"""The venv executor's isolated mode: a package installed only in the driver (pytest: lmmbench's base
install does not pull it) is not importable in an isolated venv row, while it is in a shared one; the
isolated venv still runs lmmbench's base package (a perf row against the test server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan

PROBE = ("{python} -c \"import importlib.util as u, json, sys; "
         "json.dump({'pytest': u.find_spec('pytest') is not None, 'prefix': sys.prefix}, open('probe.json', 'w'))\"")


def _probe_row(name: str, isolation: str) -> dict[str, Any]:
    return {"name": name, "kind": "command", "executor": "venv", "isolation": isolation,
            "options": {"command": PROBE, "outputs": ["probe.json"]}}


def test_driver_only_package_not_importable_in_isolated_venv_row(write_plan: Any, tmp_path: Path) -> None:
    import pytest as driver_pytest  # installed in the driver (the dev tools), not by lmmbench's base install

    assert driver_pytest is not None
    path = write_plan([
        _probe_row("iso", "isolated"), _probe_row("shared", "shared"),
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 2}},
        {"name": "load", "kind": "perf", "executor": "venv", "isolation": "isolated", "server": "ts",
         "options": {"num_requests": 3, "output_tokens": 2}},
    ], name="iso")  # fmt: skip
    run = run_plan(load_plan(path, {"out_dir": tmp_path / "out"}))
    res = {r.name: r for r in run.results}
    assert all(r.status == "ok" for r in res.values()), {n: r.error for n, r in res.items()}
    out = tmp_path / "out" / "iso"
    iso = json.loads((out / "iso" / "probe.json").read_text())
    shared = json.loads((out / "shared" / "probe.json").read_text())
    assert iso["pytest"] is False and shared["pytest"] is True
    assert Path(iso["prefix"]).parent.name == "venvs"  # it ran in a venv of lmmbench's, not the driver's
    assert res["iso"].metrics["venv_isolation"] == "isolated"
    assert res["load"].metrics["ok"] == 3 and res["load"].metrics["venv_isolation"] == "isolated"
