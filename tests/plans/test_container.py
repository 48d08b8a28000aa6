"""The container executor with a fake engine (mocks: the argv it gets; tests/plans/test_container_engine.py runs a
real one) and with no engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan

FAKE_ENGINE = Path(__file__).parent / "fake_engine.py"


def _plan(write_plan: Any, image: str | None = "lmmbench:test", name: str = "p") -> Path:
    return write_plan([
        {"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5}},
        {"name": "load", "kind": "perf", "server": "ts", "image": image,
         "options": {"num_requests": 5, "rate": 50, "output_tokens": 2}},
    ], name=name, executor="container")  # fmt: skip


def test_container_row_runs_with_its_folder_mounted_fake_engine(write_plan: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "engine.log"
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    run = run_plan(load_plan(_plan(write_plan)))
    load = next(r for r in run.results if r.name == "load")
    assert load.status == "ok" and load.executor == "container", load.error
    assert load.metrics["ok"] == 5
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[:2] == [["info"], ["image", "inspect", "lmmbench:test"]]  # the image is here (else pulled)
    assert calls[2][:5] == ["run", "--rm", "--network", "none", "--label"] and "lmmbench:test" in calls[2]  # probed
    run_argv = calls[3]
    row = str(tmp_path / "out" / "p" / "load")
    assert run_argv[:4] == ["run", "--rm", "--network", "host"] and f"{row}:/lmmbench/run" in run_argv
    assert run_argv[run_argv.index("--entrypoint") + 1] == ""  # an image's own ENTRYPOINT would get `sh -c ...`
    assert "LMMBENCH_HOME=/lmmbench/home" in run_argv and "lmmbench:test" in run_argv
    assert run_argv[-1] == "python -m lmmbench.executors.worker /lmmbench/run/job.json"
    assert (Path(row) / "perf" / "run" / "records.jsonl").is_file()  # written through the mount


def test_container_builds_an_image_with_the_requirements_once_and_removes_it_fake_engine(
        write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    log = tmp_path / "engine.log"
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    rows = [{"name": f"e{i}", "kind": "command", "image": "img:1", "requirements": ["pkg-a>=1" if i < 2 else "pkg-b"],
             "options": {"command": "true"}} for i in range(3)]  # fmt: skip
    run = run_plan(load_plan(write_plan(rows, executor="container")), constraints=constraints)
    assert [r.status for r in run.results] == ["ok", "ok", "ok"], [r.error for r in run.results]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    install = [c for c in calls if c[0] == "run" and "--name" in c]
    assert len(install) == 2  # one image for the two rows with pkg-a, one for pkg-b
    assert f"{constraints.absolute()}:/lmmbench/constraints.txt:ro" in install[0] and "img:1" in install[0]
    line = install[0][-1]
    assert line.startswith("if command -v uv >/dev/null 2>&1; then uv pip install -q --python")
    assert "else python -m pip install -q --disable-pip-version-check -c /lmmbench/constraints.txt 'pkg-a>=1'" in line
    commit = next(c for c in calls if c[0] == "commit")
    tag = commit[-1]
    assert tag.startswith("localhost/lmmbench-built:") and "LABEL lmmbench.built=1" in commit
    rows_run = [c for c in calls if c[0] == "run" and "--name" not in c and "lmmbench.probe=1" not in c]
    assert len(rows_run) == 3 and all(tag in c for c in rows_run[:2]) and tag not in rows_run[2]  # no install per row
    assert not any(c[0] == "rmi" and "img:1" in c for c in calls)  # the row's own image stays
    assert calls.index(rows_run[1]) < calls.index(["rmi", "-f", tag]) < calls.index(rows_run[2])  # gone after its rows
    assert sum(c[0] == "rmi" for c in calls) == 2


def test_a_failed_install_and_the_built_images_bound_fail_rows_alone_fake_engine(
        write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(tmp_path / "engine.log"))
    monkeypatch.setenv("LMMBENCH_LIMIT_BUILT_IMAGES", "1")
    rows = [{"name": f"e{i}", "kind": "command", "image": "img:1", "requirements": [f"pkg-{i}"],
             "options": {"command": "true"}} for i in range(2)]  # fmt: skip
    run = run_plan(load_plan(write_plan([*rows, {"name": "plain", "kind": "command", "image": "img:1",
                                                 "options": {"command": "true"}}], executor="container")))
    by = {r.name: r for r in run.results}
    assert by["e0"].status == "ok" and by["plain"].status == "ok"
    assert by["e1"].status == "failed" and "limit built_images=1" in (by["e1"].error or "")
    monkeypatch.setenv("FAKE_ENGINE_INSTALL_FAIL", "1")
    run = run_plan(load_plan(write_plan(rows[:1], name="q", executor="container")))
    error = run.results[0].error or ""
    assert "installing pkg-0 in img:1 failed: ERROR: No matching distribution" in error and "\n" not in error


def test_host_paths_of_the_options_are_mounted_and_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lmmbench.executors.container_mounts import Mount, container_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text("{}\n")
    (tmp_path / "tok").mkdir()
    row = tmp_path / "row"
    row.mkdir()
    config = {"dataset_path": "d/a.jsonl", "tokenizer": "tok", "run_name": "d", "model": "tiny-llm",
              "include_path": [str(tmp_path / "d")], "reference": str(row / "x"), "url": str(tmp_path)}
    (row / "x").write_text("")
    out, added = container_paths(config, [Mount(row, "/lmmbench/run", False)], {"dataset_path", "tokenizer",
                                                                                "include_path", "reference"})
    assert out["dataset_path"] == f"/lmmbench/host{tmp_path}/d/a.jsonl"  # relative: the driver's folder
    assert out["tokenizer"] == f"/lmmbench/host{tmp_path}/tok"  # a bare name in a field typed as a path
    assert out["include_path"] == [f"/lmmbench/host{tmp_path}/d"]
    assert out["reference"] == "/lmmbench/run/x"  # under the row folder: through its mount
    assert (out["run_name"], out["model"], out["url"]) == ("d", "tiny-llm", str(tmp_path))  # not paths
    # a file is mounted with its folder (d), which also holds the include_path
    assert {(m.host, m.read_only) for m in added} == {(tmp_path / "d", True), (tmp_path / "tok", True)}
    assert all(m.container == f"/lmmbench/host{m.host}" for m in added)


def test_no_container_engine_fails_the_container_rows_with_one_line_fake_engine(
        write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(tmp_path / "engine.log"))
    monkeypatch.setenv("FAKE_ENGINE_DOWN", "1")
    run = run_plan(load_plan(_plan(write_plan)))
    error = next(r for r in run.results if r.name == "load").error or ""
    assert "no container engine reachable" in error and "Cannot connect" in error and "\n" not in error
    assert (run.plan_dir / "plan.json").is_file()


def test_missing_engine_binary(write_plan: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "no-such-container-engine")
    run = run_plan(load_plan(_plan(write_plan)))
    assert "no container engine reachable" in (next(r for r in run.results if r.name == "load").error or "")


def test_rows_without_image_or_lmmbench_get_images_that_carry_it_fake_engine(
        write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Issue 59 (the engine faked: every image it is asked about exists, so nothing is built here; the builds run
    with podman in test_container_engine.py): a row with no image runs from the self-contained image of this
    checkout's wheel, with its kind's extras; a row whose image lacks lmmbench runs from the layer built on it,
    removed at the plan's end; an image without python, or with another Python than the row's python, is refused
    naming it."""
    from lmmbench.executors.container_lmmbench import BASE_TAG
    from lmmbench.models.tiny import lmmbench_home

    log = tmp_path / "engine.log"
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    rows = [{"name": name, "kind": "command", "image": image, "options": {"command": "true"}}
            for name, image in (("default", None), ("layered", "bare:1"), ("nopy", "nopython:1"))]  # fmt: skip
    rows.append({"name": "py", "kind": "command", "image": "img:2", "python": "3.12", "options": {"command": "true"}})
    by = {r.name: r for r in run_plan(load_plan(write_plan(rows, executor="container"))).results}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    runs = {c[-4]: c for c in calls if c[:2] == ["run", "--rm"] and "lmmbench.probe=1" not in c}  # image -> argv
    inspected = [c[-1] for c in calls if c[:2] == ["image", "inspect"]]
    assert by["default"].status == "ok" and by["layered"].status == "ok", (by["default"].error, by["layered"].error)
    default = next(i for i in inspected if i.startswith("localhost/lmmbench:"))
    assert BASE_TAG in inspected and default in runs  # the self-contained image, from the Debian base
    assert list((lmmbench_home() / "images" / "wheels").glob("*/lmmbench-*.whl"))  # built from this checkout
    layer = next(i for i in runs if i.startswith("localhost/lmmbench-built:"))
    assert ["rmi", "-f", layer] in calls and not any(c[0] == "rmi" and default in c for c in calls)
    error = by["nopy"].error or ""
    assert "image nopython:1 has no python or python3 on its PATH" in error and "\n" not in error
    assert "python: the row asks for Python 3.12; image img:2 has 3.11" in (by["py"].error or "")


@pytest.mark.parametrize(("entry", "says"), [
    ("{tmp}/absent", "does not exist"), ("{tmp}:data", "must be absolute"), ("{tmp}:/a:/b", "HOST[:CONTAINER]"),
    ("{tmp}:/x:rx", "HOST[:CONTAINER]"),
])  # fmt: skip
def test_bad_mounts_are_refused_with_one_line(entry: str, says: str, tmp_path: Path) -> None:
    from lmmbench.core.errors import UserError
    from lmmbench.executors.container_mounts import check_mounts

    with pytest.raises(UserError) as exc:
        check_mounts([entry.format(tmp=tmp_path)])
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_mounts_parse_and_are_refused_on_other_executors(tmp_path: Path) -> None:
    from lmmbench.core.errors import UserError
    from lmmbench.executors.container_mounts import check_mounts
    from lmmbench.executors.runner import resolve_plan

    a, b = check_mounts([f"{tmp_path}", f"{tmp_path}:/data:rw"])
    assert (a.container, a.read_only, b.container, b.read_only) == (str(tmp_path), True, "/data", False)
    with pytest.raises(UserError, match="both mount at /data"):
        check_mounts([f"{tmp_path}:/data", f"{tmp_path}:/data:rw"])
    csv = tmp_path / "p.csv"
    csv.write_text(f"name,kind,options,image,mounts\nc,command,command=true,img,{tmp_path};{tmp_path}:/d:rw\n")
    plan = load_plan(csv)
    assert plan.rows[0].mounts == [str(tmp_path), f"{tmp_path}:/d:rw"]
    with pytest.raises(UserError, match="mounts: only the container executor"):
        resolve_plan(plan.model_copy(update={"rows": [plan.rows[0].model_copy(update={"image": None})]}),
                     executor="subprocess")
    serve = plan.rows[0].model_copy(update={"kind": "serve", "image": None, "options": {"command": "testserver"}})
    with pytest.raises(UserError, match="'c': mounts: a serve row is started by the plan"):
        resolve_plan(plan.model_copy(update={"rows": [serve]}))


def test_gpu_flags_of_docker_and_podman() -> None:
    from lmmbench.executors.container import gpu_flags

    assert gpu_flags(["docker"], []) == []
    assert gpu_flags(["docker"], [3]) == ["--gpus", "device=3"]
    assert gpu_flags(["/usr/bin/docker"], [0, 1]) == ["--gpus", '"device=0,1"']
    assert gpu_flags(["podman", "--runtime", "runc"], [0, 1]) == ["--device", "nvidia.com/gpu=0", "--device",
                                                                 "nvidia.com/gpu=1"]


@pytest.mark.parametrize("code", [125, 126, 127])
def test_engine_exit_fails_the_row_once_with_the_engines_line_fake_engine(
        write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    log = tmp_path / "engine.log"
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", f"{sys.executable} {FAKE_ENGINE}")
    monkeypatch.setenv("FAKE_ENGINE_LOG", str(log))
    monkeypatch.setenv("FAKE_ENGINE_RUN_EXIT", str(code))
    path = write_plan([{"name": "c", "kind": "command", "image": "lmmbench:test", "options": {"command": "true"}}],
                      executor="container", max_retries=2)  # fmt: skip
    run = run_plan(load_plan(path))
    row = next(r for r in run.results if r.name == "c")
    assert row.status == "failed" and row.attempts == 1, row
    assert f"(exit code {code}): Error: fake engine failure {code}" in (row.error or "")
    runs = [c for c in (json.loads(line) for line in log.read_text().splitlines())
            if c[0] == "run" and "lmmbench.probe=1" not in c]  # fmt: skip
    assert len(runs) == 1  # not retried as a crash
