"""Hub model ids (ORG/NAME) everywhere a model or tokenizer is named, resolved offline from a Hugging Face
cache laid out as the hub leaves it (models--ORG--NAME/snapshots/<commit>/ + refs/main, built here by copying
the built-in tiny-llm folder, as FIELD-NOTES describes); a missing id is one line with the cache folder, exit 2;
the run log records the snapshot's commit."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "testorg/tiny-chat"


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from lmmbench.models.tiny import build_tiny_model

    home = tmp_path_factory.mktemp("hf")
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    shutil.copytree(build_tiny_model("tiny-llm"), repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HOME", str(home))
    mp.delenv("HF_HUB_CACHE", raising=False)
    mp.setenv("HF_HUB_OFFLINE", "1")
    yield home
    mp.undo()


def test_run_eval_and_reference_take_a_hub_id_offline(hf_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "ttft-breakdown", "--model", REPO, "--limit", "1", "--repeats", "1", "--warmup", "0",
                 "--threads", "1", "--no-progress", "--out-dir", str(out)]) == 0  # fmt: skip
    log = json.loads((out / "ttft-breakdown" / "run.json").read_text())
    snaps = log["environment"]["hub_snapshots"]
    assert any(s["repo_id"] == REPO and s["commit"] == COMMIT for s in snaps)
    assert main(["eval", "--model", REPO, "--tasks", "sample_mc", "--limit", "4", "--threads", "1",
                 "--out-dir", str(tmp_path / "eval")]) == 0  # fmt: skip
    assert main(["eval", "--model", REPO, "--revision", "main", "--tasks", "sample_mc", "--limit", "2",
                 "--threads", "1", "--out-dir", str(tmp_path / "eval-rev")]) == 0  # fmt: skip
    dump = tmp_path / "ref"
    assert main(["reference", "dump", "--model", REPO, "--out", str(dump), "--threads", "1"]) == 0
    assert (dump / "reference.json").is_file()


def test_serve_loads_a_hub_id_offline(hf_home: Path) -> None:
    from fastapi.testclient import TestClient

    from lmmbench.serve.server import ServeConfig, build_server

    engine, app = build_server(ServeConfig(model=REPO, threads=1))
    try:
        with TestClient(app) as client:
            assert client.get("/v1/models").json()["data"][0]["id"] == REPO
            reply = client.post("/v1/completions", json={"model": REPO, "prompt": "hello", "max_tokens": 2})
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2
    finally:
        engine.stop()


def test_perf_tokenizer_takes_a_hub_id(hf_home: Path, tmp_path: Path) -> None:
    from lmmbench.config.perf.testserver import TestServerConfig
    from lmmbench.core.net import free_loopback_port
    from lmmbench.testing import running_testserver

    with running_testserver(TestServerConfig(port=free_loopback_port(), ttft_ms=2, itl_ms=1)) as url:
        assert main(["perf", "--url", url, "--model", "test-model", "--tokenizer", REPO, "--num-requests", "4",
                     "--input-tokens", "12", "--output-tokens", "2", "--no-plots", "--no-progress",
                     "--out-dir", str(tmp_path), "--run-name", "tok"]) == 0  # fmt: skip
    log = json.loads((tmp_path / "perf" / "tok" / "run.json").read_text())
    assert any(s["repo_id"] == REPO for s in log["environment"]["hub_snapshots"])


@pytest.mark.parametrize("argv", [
    ["run", "ttft-breakdown", "--model", "testorg/missing", "--limit", "1"],
    ["eval", "--model", "testorg/missing", "--tasks", "sample_mc"],
    ["reference", "dump", "--model", "testorg/missing", "--out", "ref"],
    ["serve", "--model", "testorg/missing"],
])  # fmt: skip
def test_a_hub_id_missing_from_the_cache_offline_is_one_line_exit_2(
    hf_home: Path, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "testorg/missing" in err[0] and str(hf_home / "hub") in err[0]
    assert "HF_HUB_OFFLINE" in err[0]
