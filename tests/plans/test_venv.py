"""The venv executor: a fresh venv gets the sample plugin installed just in time (with the
constraints file), a plan row runs the plugin's spec in it, and a second run reuses the venv."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan
from lmmbench.executors.venvs import venv_key
from lmmbench.models.tiny import lmmbench_home

SAMPLE_PLUGIN = Path(__file__).parent / "sample_plugin"


def test_venv_installs_sample_plugin_runs_its_spec_and_is_reused(write_plan: Any, tmp_path: Path) -> None:
    from lmmbench.specs import SPECS

    assert "plugin-sum" not in SPECS  # not installed in the driver: only the venv has it
    plugin = tmp_path / "sample_plugin"  # a copy: pip's build writes build/ and *.egg-info into the source
    shutil.copytree(SAMPLE_PLUGIN, plugin)
    # a row with requirements gets an isolated venv: lmmbench's base package, its plots extra (a spec run
    # draws its plots), the plugin
    rows = [{"name": "plug", "kind": "run", "spec": "plugin-sum", "requirements": [str(plugin), "lmmbench[plots]"],
             "options": {"sizes": [1000, 20000], "repeats": 2, "warmup": 0}}]
    path = write_plan(rows, executor="venv")
    # the driver validates a row's options with the spec's model, so a plugin spec the driver does not
    # have is resolved in the venv: the plan names it and its options are checked there
    first = run_plan(load_plan(path, {"out_dir": tmp_path / "a"}))
    row = first.results[0]
    assert row.status == "ok", row.error
    assert row.metrics["venv_created"] is True and row.metrics["rows_ok"] == 4
    second = run_plan(load_plan(path, {"out_dir": tmp_path / "b"}))
    again = second.results[0]
    assert again.status == "ok" and again.metrics["venv_created"] is False
    assert again.metrics["venv_setup_s"] < row.metrics["venv_setup_s"]
    print(f"venv: first run {row.metrics['venv_setup_s']:.1f} s to create + install, "
          f"second {again.metrics['venv_setup_s']:.3f} s to reuse")
    constraints = Path(__file__).resolve().parents[2] / "constraints.txt"
    venv = lmmbench_home() / "venvs" / venv_key([str(plugin), "lmmbench[plots]"], None, constraints, "isolated")
    marker = json.loads((venv / "lmmbench-venv.json").read_text())
    assert marker["constraints"] == str(constraints)
    results = tmp_path / "b" / "p" / "plug" / "plugin-sum" / "plugin-sum_results.csv"
    assert results.is_file() and results.read_text().count("\n") == 5  # header + 2 sizes x 2 repeats
