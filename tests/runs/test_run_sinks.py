"""--mlflow URI / --wandb PROJECT: a real perf run against `lmmbench testserver` logs its config and
headline metrics to a file:// MLflow store and to W&B in offline mode; a missing library or a broken
sink is a warning, never a lost run."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.core.runs.log import RunLog, write_run_log
from lmmbench.testing import running_testserver


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One perf run logged to both sinks (a sink whose library is missing only warns)."""
    root = tmp_path_factory.mktemp("sinks")
    mp = pytest.MonkeyPatch()
    mp.setenv("LMMBENCH_STORE_URL", f"sqlite:///{root / 's.sqlite'}")
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    uri = (root / "mlruns").as_uri()
    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=5, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--concurrency", "2", "--num-requests", "10",
                     "--output-tokens", "2", "--no-plots", "--no-progress", "--out-dir", str(root),
                     "--run-name", "r", "--mlflow", uri, "--wandb", "lmmbench-test"]) == 0  # fmt: skip
    yield root / "perf" / "r", uri
    mp.undo()


def test_mlflow_file_store_gets_config_and_metrics(logged: tuple[Path, str]) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run_dir, uri = logged
    log = json.loads((run_dir / "run.json").read_text())
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("lmmbench-perf")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["lmmbench.run_id"] == log["run_id"]
    assert run.data.params["concurrency"] == "2" and run.data.params["model"] == "test-model"
    assert run.data.metrics["ttft_ms_p50"] == pytest.approx(log["headline"]["ttft_ms_p50"])


def test_wandb_offline_run_gets_config_and_summary(logged: tuple[Path, str]) -> None:
    pytest.importorskip("wandb")
    run_dir, _ = logged
    log = json.loads((run_dir / "run.json").read_text())
    (offline,) = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    data = offline.read_bytes()  # the offline run's records (protobuf; keys and JSON values are plain text)
    assert log["run_id"].encode() in data and b"concurrency" in data  # the config
    assert b"ttft_ms_p50" in data and json.dumps(log["headline"]["ttft_ms_p50"]).encode() in data  # the metric


def test_a_failing_sink_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_STORE_URL", f"sqlite:///{tmp_path / 's.sqlite'}")
    from lmmbench.core.runs import sinks as run_sinks

    def broken(run_log: RunLog, run_dir: Path, target: str) -> None:
        raise RuntimeError("tracking server down")

    monkeypatch.setitem(run_sinks.RUN_SINKS._items, "mlflow", broken)
    log = RunLog(run_id="perf-x", kind="perf", name="x", finished_at="2026-01-01T00:00:00Z",
                 config={"mlflow": "http://127.0.0.1:9"})  # fmt: skip
    with caplog.at_level(logging.WARNING):
        assert write_run_log(tmp_path, log).is_file()
    assert "tracking server down" in caplog.text
