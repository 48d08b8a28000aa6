"""Command lines of plan rows filled by the one placeholder formatter (serve, proxy and command rows), readiness
that only counts the row's own server, a command row's process group ending with it, closing counts and row
fields bounded at validation. Real servers on loopback ports chosen at run time, real subprocesses."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

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
PERF = {"num_requests": 2, "output_tokens": 2}


def _cmd(name: str, command: str, needs: list[str] | None = None, **options: Any) -> dict[str, Any]:
    return {"name": name, "kind": "command", "needs": needs or [], "options": {"command": command, **options}}


def _status(path: Path, plan: str, row: str) -> dict[str, Any]:
    return dict(json.loads((path.parent / "out" / plan / row / "status.json").read_text()))


@pytest.mark.parametrize(("rows", "message"), [
    ([{"name": "s", "kind": "serve", "options": {"command": "vllm serve {model} --port {port}"}}],
     "row 1 's': options.command: {model} is not available here: this row has no model:"),
    ([{"name": "s", "kind": "serve", "model": "m", "options": {"command": "srv --port {port} --gpu {gpu_id}"}}],
     "{gpu_id} is not a field here; the fields are {host}, {model}, {port}, {python}"),
    ([_cmd("c", "echo {model}")], "row 1 'c': options.command: {model} is not available here"),
    ([_cmd("c", "ls {outdir}")], "{outdir} is not a field here (did you mean {out_dir}?)"),
    ([_cmd("infer", "true"), _cmd("c", "ls {rows.infer.outdir}", ["infer"])],
     "row 2 'c': options.command: {rows.infer.outdir} is not a field here (did you mean {rows.infer.out_dir}?)"),
    ([_cmd("infer", "true"), {"name": "e", "kind": "eval", "model": "tiny-llm", "needs": ["infer"],
                              "options": {"tasks": "sample_mc", "resume": "{rows.infer.outdir}"}}],
     "row 2 'e': options.resume: {rows.infer.outdir} is not a field here"),
    ([_cmd("c", "echo hi > out.txt")], "'>' is shell syntax, and a command row runs without a shell"),
    ([_cmd("c", "true"), {"name": "r", "kind": "command", "requirements": ["--target=TMP/x"],
                          "executor": "venv", "options": {"command": "true"}}],
     "'--target=TMP/x' is an installer option"),
    ([{**_cmd("c", "true"), "num_cpus": ".inf"}], "row 1 'c': num_cpus"),
    ([{"name": "px", "kind": "proxy", "options": {"upstream": "ftp://127.0.0.1:9"}}],
     "options.upstream: 'ftp://127.0.0.1:9' must be an http:// or https:// URL"),
    ([{"name": "p", "kind": "perf", "options": {"url": "ftp://127.0.0.1:9"}}],
     "options.url: 'ftp://127.0.0.1:9' must be an http:// or https:// URL"),
    ([_cmd("c", "true", timeout_s=".inf")], "row 1 'c': options.timeout_s"),
])  # fmt: skip
def test_refused_before_anything_runs(write_plan: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      rows: list[dict[str, Any]], message: str) -> None:
    if rows and rows[-1].get("num_cpus") == ".inf":
        rows[-1]["num_cpus"] = float("inf")
    for row in rows:
        if row.get("options", {}).get("timeout_s") == ".inf":
            row["options"]["timeout_s"] = float("inf")
    for row in rows:  # an install that would escape the venv goes under this test's folder, never elsewhere
        row["requirements"] = [r.replace("TMP", str(tmp_path)) for r in row.get("requirements", [])]
    path = write_plan(rows, name="bad")
    assert main(["batch", str(path)]) == 2
    err = capsys.readouterr().err
    assert message.replace("TMP", str(tmp_path)) in err and "Traceback" not in err
    assert not (path.parent / "out" / "bad").exists()  # nothing ran


def test_handoff_folder_with_a_space_reaches_the_command_whole(tmp_path: Path, write_plan: Any) -> None:
    out = tmp_path / "out dir"
    script = "import sys, pathlib; pathlib.Path('got.json').write_text(__import__('json').dumps(sys.argv[1:]))"
    path = write_plan([
        _cmd("a", "true"),
        _cmd("b", f"{{python}} -c \"{script}\" {{rows.a.folder}} {{out_dir}}", ["a"]),
        _cmd("c", f"{{python}} -c \"{script}\" {{rows.a.folder}} | cat > piped.txt", ["a"], shell=True),
    ], name="hand", out_dir=str(out))  # fmt: skip
    assert main(["batch", str(path)]) == 0
    plan_dir = (out / "hand").resolve()
    got = json.loads((plan_dir / "b" / "got.json").read_text())
    assert got == [str(plan_dir / "a"), str(plan_dir / "b")]
    assert json.loads((plan_dir / "c" / "got.json").read_text()) == [str(plan_dir / "a")]
    assert (plan_dir / "c" / "piped.txt").exists()  # shell: true ran the pipe and the redirection


def test_command_row_past_its_timeout_takes_its_children_with_it(write_plan: Any) -> None:
    path = write_plan([_cmd("slow", "sleep 60 & echo $! > child.pid; wait", shell=True, timeout_s=1)], name="to")
    assert main(["batch", str(path)]) == 2  # its one row failed
    st = _status(path, "to", "slow")
    assert st["status"] == "failed" and "past timeout_s 1" in st["error"]
    child = int((path.parent / "out" / "to" / "slow" / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # a SIGKILLed child is reaped by init: gone at once or within moments
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def test_closing_line_counts_skipped_rows_apart(write_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_plan([_cmd("broken", "false"), _cmd("after", "true", ["broken"]), _cmd("later", "true", ["after"]),
                       _cmd("fine", "true")], name="counts")  # fmt: skip
    assert main(["batch", str(path)]) == 3
    cap = capsys.readouterr()
    assert "1 ok, 1 failed, 2 skipped" in cap.out
    skipped = [line for line in cap.err.splitlines() if line.startswith("[batch] after:")]
    assert skipped and "skipped" in skipped[0] and "attempt" not in skipped[0]
    assert _status(path, "counts", "after")["attempts"] == 0


def test_serve_row_json_argument_and_model_reach_the_server_whole(tmp_path: Path, write_plan: Any) -> None:
    script = tmp_path / "srv.py"
    script.write_text(WRAPPER)
    argv_out = tmp_path / "argv.json"
    line = f"{sys.executable} {script} --port {{port}} --served {{model}} --cfg '{{\"temperature\": 0}}'"
    path = write_plan([
        {"name": "s", "kind": "serve", "model": "test-model",
         "options": {"command": line, "env": {"ARGV_OUT": str(argv_out)}, "telemetry_interval_s": 0}},
        {"name": "load", "kind": "perf", "server": "s", "options": PERF},
    ], name="srv")  # fmt: skip
    assert main(["batch", str(path)]) == 0
    argv = json.loads(argv_out.read_text())
    assert argv[2:] == ["--served", "test-model", "--cfg", '{"temperature": 0}']


def test_proxy_row_on_a_port_another_server_holds_is_refused(write_plan: Any) -> None:
    port = free_loopback_port()
    with running_testserver(TestServerConfig(port=port, ttft_ms=1, itl_ms=1)) as other:
        path = write_plan([
            {"name": "px", "kind": "proxy", "options": {"upstream": other, "port": port}},
            {"name": "load", "kind": "perf", "server": "px", "options": PERF},
        ], name="taken")  # fmt: skip
        assert main(["batch", str(path)]) != 0
    px, load = _status(path, "taken", "px"), _status(path, "taken", "load")
    assert px["status"] == "failed" and f"cannot listen on 127.0.0.1:{port}" in px["error"]
    assert load["status"] == "failed" and "serve row 'px'" in load["error"]  # the other server was not measured
