"""Every documented bash block runs as pasted, in document order, in one fresh folder (scripts/test.sh: docs leg).

A block that cannot run here carries a visible first line ``# not run by the docs test: <why>`` and is skipped
with that reason; an unmarked block that fails (non-zero exit with ``bash -e -o pipefail``), or that leaves a
process running at its end (a server started with ``&`` and never stopped), fails its test. The run's counts are
pytest's closing line: passed = blocks run, skipped = skipped by marker, failed.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from docs.doc_blocks import (
    FIRST_SHARD_FILES,
    ROOT,
    DocBlock,
    all_blocks,
    blocks_of,
    ports_held,
    run_block,
    shard_blocks,
)

pytestmark = pytest.mark.docs

BLOCKS = shard_blocks(os.environ.get("LMMBENCH_DOCS_SHARD"))
#: A block's limit is never below this (a few blocks run short benchmarks or evaluations on the tiny models)...
BLOCK_TIMEOUT_S = 420.0
#: ... and grows with what the block does and how loaded the machine is: this many of this run's calibration
#: (one ``lmmbench --help`` in the docs venv: 0.7-1.5 s on a 2-core EPYC, quiet to load 12) per command line of the
#: block. docs/shapes.md:9 (3 commands) was killed at a bare 420 s at load 3-6. The calibration is timed again just
#: before each block (the larger of it and the folder's): scripts/test.sh runs this leg beside the parallel pass and
#: the version legs, so the CPU left to it changes while the leg runs.
CALIBRATIONS_PER_COMMAND = 150


def block_limit_s(block: DocBlock, calibration_s: float) -> float:
    """The seconds ``block`` may take, given this run's calibration (``CALIBRATIONS_PER_COMMAND``)."""
    return max(BLOCK_TIMEOUT_S, CALIBRATIONS_PER_COMMAND * max(1, block.commands) * calibration_s)


def _docs_venv(folder: Path) -> Path:
    """``folder/.venv``: a venv of its own (a block's ``pip install`` lands there, not in the test's venv) that sees
    the test venv's packages through a ``.pth`` line, with an ``lmmbench`` command run by its own Python."""
    import subprocess
    import sysconfig

    venv = folder / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    parent_site = sysconfig.get_paths()["purelib"]
    (site / "_lmmbench_docs_parent.pth").write_text(f"import site; site.addsitedir({parent_site!r})\n")
    script = venv / "bin" / "lmmbench"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom lmmbench.cli.main import main\n"
                      "sys.exit(main())\n")  # fmt: skip
    script.chmod(0o755)
    return venv


@pytest.fixture(scope="module")
def docs_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], float]]:
    """The fresh folder every block runs in: its own ``.venv`` (see ``_docs_venv``) first on PATH, the repository's
    files beside it, and its own HOME and LMMBENCH_HOME (so ``~/.cache/lmmbench`` in a block is this run's)."""
    folder = tmp_path_factory.mktemp("docs")
    for name in ("docs", "tests", "scripts", "constraints.txt", "pyproject.toml", "src", "benchmarks"):
        if (ROOT / name).exists():
            (folder / name).symlink_to(ROOT / name)
    venv = _docs_venv(folder)
    home = folder / ".home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "LMMBENCH_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), LMMBENCH_HOME=str(home / ".cache" / "lmmbench"), HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", PATH=f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
               PYTHONPATH=str(ROOT / "src"), PIP_DISABLE_PIP_VERSION_CHECK="1")  # fmt: skip
    yield folder, env, _calibrate(folder, env)
    shutil.rmtree(folder, ignore_errors=True)


def test_blocks_are_found_with_their_markers() -> None:
    every = all_blocks()
    assert len(every) >= 40, len(every)
    assert every[0].path == "README.md"
    assert any(b.skip_reason for b in every) and any(b.skip_reason is None for b in every)


def test_the_two_shards_split_the_blocks_by_file() -> None:
    first, rest = shard_blocks("first"), shard_blocks("rest")
    assert {b.path for b in first} == set(FIRST_SHARD_FILES)  # every named file exists and has blocks
    assert not {b.path for b in first} & {b.path for b in rest}
    assert sorted(b.where for b in first + rest) == sorted(b.where for b in all_blocks())
    with pytest.raises(ValueError, match="LMMBENCH_DOCS_SHARD"):
        shard_blocks("second")


def test_the_parser_reads_markers_and_indented_fences(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("text\n```bash\n# not run by the docs test: needs a GPU\nnvidia-smi\n```\n"
                   "- item\n  ```bash\n  echo hi\n  ```\n```python\nprint(1)\n```\n"
                   "<!-- example: mine.py -->\n```python\nX = 1\n```\n")  # fmt: skip
    found = blocks_of(doc)
    assert [(b.line, b.skip_reason, b.save_as) for b in found] == [(2, "needs a GPU", None), (7, None, None),
                                                                   (14, None, "mine.py")]  # fmt: skip
    assert found[1].text == "echo hi\n" and found[2].text == "X = 1\n"


def test_a_blocks_fixed_ports_are_found_and_held_against_the_other_shard(tmp_path: Path) -> None:
    import subprocess
    import time

    block = DocBlock("x.md", 1, "lmmbench serve --port 8000 &\ncurl 127.0.0.1:8123/health\n"
                     "rows: [{port: 8011}]\nsleep 30000\n", None)  # fmt: skip
    assert block.ports == [8000, 8011, 8123]  # `sleep 30000` is not a port
    holder = ("import sys, time; sys.path.insert(0, sys.argv[1]); from docs.doc_blocks import ports_held\n"
              "with ports_held([8011]):\n    print('held', flush=True); time.sleep(2)\n")  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", holder, str(ROOT / "tests")], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with ports_held([8000, 8011]):  # waits for the other process's hold on 8011
            waited_s = time.monotonic() - t0
    finally:
        other.wait(timeout=30)
    assert waited_s > 1.0, waited_s


def _calibrate(folder: Path, env: dict[str, str], runs: int = 2) -> float:
    """Seconds one ``lmmbench --help`` takes in the docs venv now (the best of ``runs``: the first also warms
    caches)."""
    import subprocess
    import time

    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        subprocess.run(["lmmbench", "--help"], cwd=folder, env=env, check=True, capture_output=True, timeout=300)
        best = min(best, (time.perf_counter_ns() - t0) / 1e9)
    return best


def test_a_blocks_limit_grows_with_its_commands_and_the_calibration() -> None:
    one = DocBlock("x.md", 1, "lmmbench serve --port 8000 &\n# a comment\n\n", None)
    three = DocBlock("x.md", 1, "a \\\n  --b\nc\nd\n", None)
    assert (one.commands, three.commands) == (1, 3)
    assert block_limit_s(one, 0.5) == BLOCK_TIMEOUT_S  # never below the floor
    assert block_limit_s(three, 2.0) == 3 * CALIBRATIONS_PER_COMMAND * 2.0 > block_limit_s(three, 1.0)


@pytest.mark.timeout(0)  # the block's own limit decides (block_limit_s), not pytest-timeout's default
@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_block_runs_as_pasted(block: DocBlock, docs_folder: tuple[Path, dict[str, str], float]) -> None:
    if block.skip_reason is not None:
        pytest.skip(f"marked in the doc: {block.skip_reason}")
    folder, env, calibration_s = docs_folder
    if block.save_as is not None:  # "save this as NAME": written where the reader would save it
        (folder / block.save_as).write_text(block.text, encoding="utf-8")
        return
    calibration_s = max(calibration_s, _calibrate(folder, env, runs=1))  # the CPU left to this leg now
    run = run_block(block, folder, env, block_limit_s(block, calibration_s))
    tail = run.output[-3000:]
    assert run.returncode == 0, f"{block.where} exited {run.returncode} after {run.seconds:.0f} s:\n{tail}"
    assert not run.left_running, f"{block.where} left processes running at its end: {run.left_running}"
