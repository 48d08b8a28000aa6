"""One plugin of every registry kind, installed with pip from a throwaway package and used by name.

The package is tests/extending/demo_plugin (the plugins docs/extending.md shows). It is installed
once per module with ``pip install --no-deps --no-build-isolation --target`` (a real install: a
built wheel's files and its dist-info with entry_points.txt), and every use runs in a fresh
interpreter with that folder on ``PYTHONPATH``, so the test process's registries are untouched.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[1]

#: ``perf --arrival`` / ``--dataset`` are ``registered_in(...)`` fields (config/registry_field.py), not
#: Literal copies of the names, so a plugin's arrival process and data set are selectable by name.
CLI_SELECTABLE_AFTER_LITERAL_SWAP: dict[str, bool] = {"arrival": True, "dataset": True}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("demo_plugin")
    src = work / "src"
    shutil.copytree(_HERE / "demo_plugin", src)  # pip's build writes build/ and *.egg-info into the source
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(src)], check=True, capture_output=True, text=True)  # fmt: skip
    return site


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT / "src"), str(site)])}


def _cli(site: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lmmbench.cli.main", *args], env=_env(site), cwd=cwd,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_cli_lists_the_plugin_task_with_its_metric_and_the_plugin_spec(plugin_site: Path) -> None:
    tasks = _cli(plugin_site, "tasks")
    assert tasks.returncode == 0, tasks.stderr
    line = next(x for x in tasks.stdout.splitlines() if x.startswith("demo_qa "))
    assert "2 samples" in line and "demo_exact" in line  # the task file validated against the plugin metric
    specs = _cli(plugin_site, "specs")
    assert specs.returncode == 0 and "demo-sum" in specs.stdout


def test_a_plan_runs_the_plugin_spec_on_the_plugin_executor_with_its_report_and_sink(
    plugin_site: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("name,kind,model,options,executor,requirements,image\nsum,run,,spec=demo-sum,,,\n")
    done = _cli(plugin_site, "batch", str(plan), "--executor", "demo-inline", "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    plan_dir = tmp_path / "out" / "plan"
    assert (plan_dir / "demo_executor.log").read_text().split() == ["sum"]
    run_dir = plan_dir / "sum" / "demo-sum"
    assert "demo-sum_results.csv" in (run_dir / "demo_report.txt").read_text().split()
    sunk = [json.loads(x) for x in (run_dir / "demo_sink.jsonl").read_text().splitlines()]
    run_log = json.loads((run_dir / "run.json").read_text())
    assert [(s["run_id"], s["kind"]) for s in sunk] == [(run_log["run_id"], "spec")]


@pytest.fixture(scope="module")
def library_uses(plugin_site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("uses")
    done = subprocess.run([sys.executable, str(_HERE / "use_plugins.py"), str(work)], env=_env(plugin_site),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_library_uses_every_other_plugin_by_name(library_uses: dict[str, Any]) -> None:
    u = library_uses
    assert u["stream_clients"] == {"base_url": "http://127.0.0.1:1"}
    gaps = [b - a for a, b in zip(u["arrivals"], u["arrivals"][1:], strict=False)]
    assert gaps == [50_000_000, 150_000_000, 50_000_000]  # half, one and a half, half of the 100 ms mean gap
    assert u["accuracy_metrics"] == 0.5  # one of two predictions right
    assert u["lmeval_aggregation"] == "mean"  # an lm-eval-format task file may name the plugin metric
    assert u["model_families"] == "demo_vlm" and u["processor_parts"] == "demo_vlm"
    assert u["hook_layouts"] == ["demo_vlm", "the vision tower", "the text model"]  # detected by class name
    assert len(u["perf_dataset"]) == 3 and all(set(t.split()) == {"word"} for t in u["perf_dataset"])
    assert u["episode_suites"] == "demo-suite" and u["episode_policies"] == ["demo-policy", 3, True]


def test_serve_runs_the_model_on_the_plugin_engine(plugin_site: Path, port: int) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main", "serve", "--model", "tiny-llm",
                             "--engine", "demo-engine", "--port", str(port)], env=_env(plugin_site),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "serve did not come up"
                time.sleep(0.3)
        body = json.dumps({"model": "tiny-llm", "prompt": "hello", "max_tokens": 2}).encode()
        req = urllib.request.Request(f"{base}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            out = json.loads(r.read())
        assert out["usage"]["completion_tokens"] == 2 and out["choices"][0]["finish_reason"] == "length"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_perf_config_accepts_the_plugin_arrival_and_data_set(library_uses: dict[str, Any]) -> None:
    assert library_uses["pending_cli"] == CLI_SELECTABLE_AFTER_LITERAL_SWAP


def test_the_plugin_prompt_and_multimodal_benchmark_resolve_by_name(library_uses: dict[str, Any]) -> None:
    assert library_uses["prompts"] == ["demo-qa@1", "Question: {{question}}"]
    assert library_uses["lmms_tasks"][0] == "demo_chartqa" and library_uses["lmms_tasks"][2] == "train"
    assert library_uses["lmms_tasks"][3]  # ChartQA's metrics, carried by the plugin's entry


def test_perf_runs_the_plugin_arrival_and_data_set_from_the_cli(plugin_site: Path, tmp_path: Path, port: int) -> None:
    server = subprocess.Popen([sys.executable, "-m", "lmmbench.cli.main", "testserver", "--port", str(port),
                               "--ttft-ms", "1", "--itl-ms", "1"], env=_env(plugin_site),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        done = _cli(plugin_site, "perf", "--url", f"http://127.0.0.1:{port}", "--dataset", "demo-dataset",
                    "--arrival", "demo-arrival", "--rate", "50", "--num-requests", "6", "--run-name", "plugin",
                    "--out-dir", str(tmp_path))  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run_log = json.loads((tmp_path / "perf" / "plugin" / "run.json").read_text())
    assert run_log["config"]["dataset"] == "demo-dataset" and run_log["config"]["arrival"] == "demo-arrival"
    records = (tmp_path / "perf" / "plugin" / "records.csv").read_text().splitlines()
    assert len(records) == 1 + 6  # header + the six measured requests, all from the plugin's data set


def _registries() -> dict[str, tuple[str, str]]:
    """Every ``NAME = Registry("kind")`` in src: NAME -> (kind, file)."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted((_ROOT / "src" / "lmmbench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Call):
                call = node.value
                if isinstance(call.func, ast.Name) and call.func.id == "Registry" and call.args:
                    target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
                    assert isinstance(target, ast.Name) and isinstance(call.args[0], ast.Constant)
                    found[target.id] = (str(call.args[0].value), str(path.relative_to(_ROOT)))
    return found


def test_docs_and_the_demo_plugin_cover_every_registry() -> None:
    registries = _registries()
    assert len(registries) >= 15
    doc = (_ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    pyproject = (_HERE / "demo_plugin" / "pyproject.toml").read_text(encoding="utf-8")
    groups = set(re.findall(r'entry-points\."lmmbench\.([a-z_]+)"', pyproject))
    for name, (kind, file) in registries.items():
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{name}`")), "")
        assert f"`{file.removeprefix('src/')}`" in row and f"`lmmbench.{kind}`" in row, f"docs/extending.md: {name}"
        assert kind in groups, f"demo plugin has no lmmbench.{kind} entry point"
