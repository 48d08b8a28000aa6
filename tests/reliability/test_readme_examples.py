"""The server-then-client examples of the README (and docs/reliability.md) run as written: the bash
block is taken from the file's own text; only the port (a free one) and the `lmmbench` executable
(this interpreter) are substituted. `testserver &` followed at once by `perf` must not race."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lmmbench.core.net import free_loopback_port

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)


def _server_then_client_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in ("README.md", "docs/reliability.md"):
        for i, block in enumerate(BLOCK.findall((ROOT / doc).read_text(encoding="utf-8"))):
            if re.search(r"lmmbench (testserver|serve)\b.*&\s*(#.*)?$", block, re.MULTILINE) and " perf " in block:
                out.append((f"{doc}#{i}", block))
    return out


BLOCKS = _server_then_client_blocks()


def test_the_docs_have_server_then_client_examples() -> None:
    assert any(name.startswith("README.md") for name, _ in BLOCKS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "block"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_server_then_client_example_runs_as_written(name: str, block: str, tmp_path: Path) -> None:
    ports = set(re.findall(r"--port (\d+)", block))
    assert ports, f"{name}: the example names its port"
    script = block
    for port in ports:
        script = script.replace(port, str(free_loopback_port()))
    lmmbench = f"{shlex.quote(sys.executable)} -m lmmbench.cli.main"
    script = re.sub(r"(\S*/)?lmmbench (?=(testserver|serve|perf)\b)", lmmbench + " ", script)
    proc = subprocess.run(["bash", "-e", "-c", script + "\nwait\n"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=110)  # fmt: skip
    assert proc.returncode == 0, f"{name}:\n{script}\n{proc.stderr[-3000:]}"
    summaries = list(tmp_path.rglob("summary.csv"))
    assert len(summaries) == 1, f"{name}: one run folder with a summary"
    lines = summaries[0].read_text().splitlines()
    header, row = lines[0].split(","), lines[1].split(",")
    record = dict(zip(header, row, strict=False))
    assert int(record["ok"]) == int(record["requests"]) > 0 and int(record.get("errors") or 0) == 0
