"""``perf --server-cmd`` filled by the one placeholder formatter: ``{model}`` and a JSON argument reach the
server whole, an open ``{port``, a line without ``{port}`` and ``{batch}`` under ``--rates`` are refused before
anything starts, a server that exits at once is named so, and a ``--url`` port another server holds is refused
before the command starts (so that server is never measured). The server is a real testserver behind a small
wrapper that records the argv it was given."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver

WRAPPER = """import json, os, sys
from pathlib import Path
Path(os.environ["ARGV_OUT"]).write_text(json.dumps(sys.argv[1:]))
port = sys.argv[sys.argv.index("--port") + 1]
os.execv(sys.executable, [sys.executable, "-m", "lmmbench.cli.main", "testserver", "--port", port, "--ttft-ms", "1",
                          "--itl-ms", "1"])
"""


@pytest.fixture()
def wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    script = tmp_path / "srv.py"
    script.write_text(WRAPPER)
    out = tmp_path / "argv.json"
    monkeypatch.setenv("ARGV_OUT", str(out))
    yield f"{sys.executable} {script}", out


def _perf(tmp_path: Path, port: int, server_cmd: str, *extra: str) -> int:
    return main(["perf", "--url", f"http://127.0.0.1:{port}", "--model", "test-model", "--server-cmd", server_cmd,
                 "--num-requests", "2", "--output-tokens", "2", "--no-plots", "--out-dir", str(tmp_path / "o"),
                 *extra])  # fmt: skip


def test_model_and_a_json_argument_reach_the_server_whole(tmp_path: Path, wrapper: tuple[str, Path]) -> None:
    cmd, out = wrapper
    port = free_loopback_port()
    line = f"{cmd} --port {{port}} --served-model-name {{model}} --override-generation-config '{{\"temperature\": 0}}'"
    assert _perf(tmp_path, port, line) == 0
    argv = json.loads(out.read_text())
    assert argv == ["--port", str(port), "--served-model-name", "test-model", "--override-generation-config",
                    '{"temperature": 0}']  # fmt: skip


@pytest.mark.parametrize(("line", "message"), [
    ("{cmd} --port {{port", "'{port' is not closed"),
    ("{cmd} --port 8000", "must take its port from {port}"),
    ("{cmd} --port {{port}} --max-num-seqs {{batch}}", "{batch} is not available here"),
    ("{cmd} --port {{port}} --out {{outdir}}", "{outdir} is not a field here"),
])  # fmt: skip
def test_bad_server_cmd_refused_before_anything_starts(tmp_path: Path, wrapper: tuple[str, Path], line: str,
                                                       message: str, capsys: pytest.CaptureFixture[str]) -> None:
    cmd, out = wrapper
    assert _perf(tmp_path, free_loopback_port(), line.format(cmd=cmd), "--rates", "5") == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "o").exists()  # nothing started, no run folder


def test_server_that_exits_at_once_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = f"{sys.executable} -c 'import sys; sys.exit(3)' --port {{port}}"
    assert _perf(tmp_path, free_loopback_port(), line) == 2
    assert "the server exited with code 3 before it was ready" in capsys.readouterr().err


def test_url_port_held_by_another_server_is_refused_before_starting(
        tmp_path: Path, wrapper: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    cmd, out = wrapper
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=1, itl_ms=1)):
        assert _perf(tmp_path, port, f"{cmd} --port {{port}}") == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--url port" in err
    assert not out.exists()  # the command never ran; the other server was not measured
