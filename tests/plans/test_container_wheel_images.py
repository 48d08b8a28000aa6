"""Images that carry lmmbench (issue 59), with a real engine (podman) and images built here (no registry is
reachable): `lmmbench envs build-image` (lmmbench from a wheel of this checkout, no extras: the smallest image, built
once per session and source state, cached by content), the default of container rows that name no image; lmmbench
layered on a row's own image that lacks it; the image moved to an empty storage with `podman save` / `load`.
Without podman the tests are skipped with the reason, except under CI (``CI`` set), where they fail."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.executors import load_plan
from lmmbench.executors.runner import run_plan

pytestmark = pytest.mark.timeout(1500)  # the first build waits for the base image (debootstrap) when it is missing
ROOT = Path(__file__).resolve().parents[2]
# Mount points a container has whatever it is given (podman's own files, the kernel's file systems).
ENGINE_OWN = ("/", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv", "/dev", "/proc", "/sys")
ROW_OWN = ("/lmmbench/run", "/lmmbench/home")  # the row's folder and $LMMBENCH_HOME


def _podman_or_skip() -> None:
    proc = subprocess.run(["podman", "info"], capture_output=True, text=True, check=False) \
        if shutil.which("podman") else None  # fmt: skip
    if proc is None or proc.returncode != 0:
        reason = "no container engine: podman " + ("is not installed" if proc is None else "info fails")
        if os.environ.get("CI"):  # CI's setup installs podman
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def slim_image() -> str:
    """`lmmbench envs build-image` (no extras) with podman: the image's name."""
    _podman_or_skip()
    old = os.environ.get("LMMBENCH_CONTAINER_ENGINE")
    os.environ["LMMBENCH_CONTAINER_ENGINE"] = "podman"
    try:
        proc = subprocess.run([sys.executable, "-c", "import sys; from lmmbench.cli.main import main; sys.exit(main())",
                               "envs", "build-image"], capture_output=True, text=True, timeout=1200, check=False)
    finally:
        os.environ.pop("LMMBENCH_CONTAINER_ENGINE") if old is None else os.environ.update(LMMBENCH_CONTAINER_ENGINE=old)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


def _inspect(image: str, fmt: str, *engine: str) -> str:
    return subprocess.run([*(engine or ("podman",)), "image", "inspect", "--format", fmt, image], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


def _bind_mounts(mountinfo: str) -> set[str]:
    """The mount points of a container's /proc/self/mountinfo beyond the engine's own."""
    points = {line.split()[4] for line in mountinfo.splitlines() if len(line.split()) > 4}
    return {p for p in points if p not in ENGINE_OWN and not p.startswith(("/dev/", "/proc/", "/sys/"))}


SHOW = ("python -m pip list --format=freeze > pip.txt; (python -c 'import pytest' 2> import.txt || true); "
        "python -c 'import lmmbench, importlib.metadata as m; print(lmmbench.__file__); "
        "print(m.distribution(\"lmmbench\").read_text(\"direct_url.json\"))' > where.txt; "
        "cat /proc/self/mountinfo > mounts.txt")


def test_a_row_without_image_runs_lmmbench_from_the_checkouts_wheel_not_the_hosts_venv_podman(
        slim_image: str, write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import pytest as host_only  # installed in the host's venv (the dev extra), in no image

    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "podman")
    created = _inspect(slim_image, "{{.Id}} {{.Created}}")
    assert main(["envs", "build-image"]) == 0  # a second call: the same image, nothing built
    assert capsys.readouterr().out.strip().splitlines()[-1] == slim_image
    assert _inspect(slim_image, "{{.Id}} {{.Created}}") == created
    images = ["podman", "images", "-q"]
    before = subprocess.run(images, capture_output=True, text=True, check=True).stdout.split()
    rows = [{"name": "show", "kind": "command", "options": {"command": SHOW, "shell": True}}]
    row = run_plan(load_plan(write_plan(rows, executor="container"))).results[0]
    assert row.status == "ok", row.error
    assert subprocess.run(images, capture_output=True, text=True, check=True).stdout.split() == before  # no build
    folder = tmp_path / "out" / "p" / "show"
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)  # type: ignore[union-attr]
    pip_list = (folder / "pip.txt").read_text().splitlines()
    assert f"lmmbench=={version}" in pip_list and not any(p.startswith("torch==") for p in pip_list)  # no extras
    assert host_only.__file__ and "No module named 'pytest'" in (folder / "import.txt").read_text()
    where = (folder / "where.txt").read_text()
    assert where.startswith("/opt/lmmbench/lib/python3") and f"lmmbench-{version}-py3-none-any.whl" in where
    wheel = next((Path(os.environ["LMMBENCH_HOME"]) / "images" / "wheels").glob("*/lmmbench-*.whl"))
    assert _inspect(slim_image, '{{index .Labels "lmmbench.wheel"}}') == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert _bind_mounts((folder / "mounts.txt").read_text()) <= set(ROW_OWN)  # nothing of the host but the row's


def test_the_image_saved_and_loaded_into_an_empty_storage_runs_rows_podman(
        slim_image: str, write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import tempfile

    archive, root = tmp_path / "image.tar", tmp_path / "storage"
    runroot = Path(tempfile.mkdtemp(prefix="lmb-run-", dir="/tmp"))  # podman: a run root of at most 50 characters
    engine = ("podman", "--root", str(root), "--runroot", str(runroot))
    try:
        subprocess.run(["podman", "save", "-q", "-o", str(archive), slim_image], check=True, timeout=600)
        load = subprocess.run([*engine, "load", "-q", "-i", str(archive)], capture_output=True, text=True,
                              timeout=600, check=False)  # fmt: skip
        assert load.returncode == 0, load.stderr[-2000:]
        assert subprocess.run([*engine, "images", "-q"], capture_output=True, text=True,
                              check=True).stdout.split() == [_inspect(slim_image, "{{.Id}}")[:12]]  # fmt: skip
        monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", " ".join(engine))
        rows = [{"name": "ts", "kind": "serve", "options": {"command": "testserver", "ttft_ms": 5}},
                {"name": "load", "kind": "perf", "server": "ts", "image": slim_image,
                 "options": {"num_requests": 3, "rate": 50, "output_tokens": 2, "plots": False}},
                {"name": "show", "kind": "command", "image": slim_image,
                 "options": {"command": SHOW, "shell": True}}]  # fmt: skip
        run = run_plan(load_plan(write_plan(rows, executor="container")))
        by = {r.name: r for r in run.results}
        assert by["load"].status == "ok" and by["show"].status == "ok", (by["load"].error, by["show"].error)
        assert by["load"].metrics["ok"] == 3  # the serve row on the host, reached from the loaded image
        assert _bind_mounts((run.plan_dir / "show" / "mounts.txt").read_text()) <= set(ROW_OWN)
    finally:
        subprocess.run([*engine, "rmi", "-af"], capture_output=True, check=False)
        subprocess.run([*engine, "system", "reset", "-f"], capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runroot, ignore_errors=True)


@pytest.fixture(scope="session")
def no_python_image(slim_image: str) -> Iterator[str]:
    """The Debian base with its python3 removed (committed here, removed after the session)."""
    from lmmbench.executors.container_lmmbench import BASE_TAG

    bare, box = "localhost/lmmbench-nopython:test", f"lmmbench-nopython-{os.getpid()}"
    subprocess.run(["podman", "run", "--name", box, BASE_TAG, "sh", "-c", "rm -f /usr/bin/python3*"],
                   check=True, capture_output=True)  # fmt: skip
    subprocess.run(["podman", "commit", "-q", box, bare], check=True, capture_output=True)
    subprocess.run(["podman", "rm", "-f", box], check=True, capture_output=True)
    yield bare
    subprocess.run(["podman", "rmi", "-f", bare], capture_output=True, check=False)


def test_build_image_refuses_in_one_line_what_it_cannot_build_podman(
        no_python_image: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--python: a version the base does not have and uv cannot download (its mirror pointed at a missing folder:
    the same answer whether GitHub resolves or not) is refused naming it and the base's; --base: an image without
    python3; --extras: one lmmbench does not declare; --python not X.Y."""
    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "podman")
    monkeypatch.setenv("UV_PYTHON_INSTALL_MIRROR", "file:///nonexistent-lmmbench-mirror")
    cases = [(["--python", "3.12"], "Python 3.12: the image has Python 3.11"), (["--base", no_python_image],
             "the image has no python3"), (["--extras", "eval,nope"], "extras nope: lmmbench"),
             (["--python", "3"], "'3' is not a Python version X.Y")]  # fmt: skip
    for args, says in cases:
        assert main(["envs", "build-image", *args]) == 2, args
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]  # beside progress
        assert len(err) == 1 and says in err[0], (args, err)


def test_a_rows_image_without_lmmbench_gets_it_layered_then_removed_and_one_without_python_is_refused_podman(
        no_python_image: str, write_plan: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The Debian base (python3, no lmmbench) as a row's image: lmmbench from the same wheel is layered on it for
    the plan and removed at its end; the base with its python removed is refused naming what is missing."""
    from lmmbench.executors.container_lmmbench import BASE_TAG

    monkeypatch.setenv("LMMBENCH_CONTAINER_ENGINE", "podman")
    base, bare = BASE_TAG, no_python_image
    built = ["podman", "images", "-q", "--filter", "label=lmmbench.built=1"]
    before = subprocess.run(built, capture_output=True, text=True, check=True).stdout.split()
    show = "python -c 'import lmmbench, sys; print(lmmbench.__file__, sys.base_prefix)'"
    rows = [{"name": "layered", "kind": "command", "image": base, "options": {"command": show}},
            {"name": "nopy", "kind": "command", "image": bare, "options": {"command": "true"}}]  # fmt: skip
    run = run_plan(load_plan(write_plan(rows, executor="container")))
    by = {r.name: r for r in run.results}
    assert by["layered"].status == "ok", by["layered"].error
    log = (run.plan_dir / "layered" / "command.log").read_text()
    assert "/opt/lmmbench/lib/python3.11/site-packages/lmmbench/__init__.py /usr" in log  # Debian's python
    assert by["nopy"].status == "failed" and "has no python or python3 on its PATH" in (by["nopy"].error or "")
    assert subprocess.run(built, capture_output=True, text=True, check=True).stdout.split() == before  # removed
    assert subprocess.run(["podman", "image", "exists", base], check=False).returncode == 0  # the row's stays
