"""The fenced bash blocks of README.md and docs/*.md, in document order, and how the docs test runs one.

A block that cannot run on a CPU machine without network (a GPU, a hub model, a remote cluster, the network,
minutes of benchmark) says so in its first line, visibly, as a shell comment::

    # not run by the docs test: needs a GPU

A block of any language preceded by ``<!-- example: NAME -->`` (the text around it says "save this as NAME") is
written to ``NAME`` in the folder at its place in the document, so later blocks find it. Every other bash block is
run as pasted: in one fresh folder shared by all blocks of its shard (so a block sees what earlier
blocks wrote, as a reader pasting them in order would), each block in its own process group that is killed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_MARKER = re.compile(r"^#\s*not run by the docs test:\s*(?P<why>\S.*)$")
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[A-Za-z0-9_-]*)\s*$")
_PORT = re.compile(r"(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(\d{4,5})\b|--port[ =](\d{4,5})\b|\bport:\s*(\d{4,5})\b")
_SAVE_AS = re.compile(r"^<!--\s*example:\s*(?P<name>[\w.-]+\.\w+)\s*-->$")


@dataclass(frozen=True)
class DocBlock:
    """One fenced block: where it is, its text, why it is skipped (None: it runs), and the file it is saved as
    (``save_as``: written, not run)."""

    path: str
    line: int
    text: str
    skip_reason: str | None
    save_as: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def commands(self) -> int:
        """How many command lines the block runs: non-blank, non-comment lines, a line continued with ``\\`` once."""
        n, continued = 0, False
        for line in self.text.splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith("#") and not continued:
                n += 1
            continued = stripped.endswith("\\")
        return n

    @property
    def ports(self) -> list[int]:
        """The fixed local ports the block names (``127.0.0.1:8000``, ``--port 8000``, ``port: 8000``), sorted."""
        return sorted({int(next(g for g in m.groups() if g)) for m in _PORT.finditer(self.text)})


def doc_files() -> list[Path]:
    """README.md first, then docs/*.md by name: the order a reader meets them."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks_of(path: Path) -> list[DocBlock]:
    """The ```bash blocks of one Markdown file (``line`` is the fence's line, 1-based)."""
    out: list[DocBlock] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or not m.group("lang"):
            i += 1
            continue
        start, lang, indent = i, m.group("lang"), len(m.group("indent"))
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
        saved = _SAVE_AS.match(lines[start - 1].strip()) if start > 0 else None
        if saved is not None:
            out.append(DocBlock(name, start + 1, "\n".join(body) + "\n", None, saved.group("name")))
            continue
        if lang not in ("bash", "sh", "shell"):
            continue
        first = next((b.strip() for b in body if b.strip()), "")
        marker = SKIP_MARKER.match(first)
        out.append(DocBlock(name, start + 1, "\n".join(body) + "\n",
                            marker.group("why") if marker else None))  # fmt: skip
    return out


def all_blocks() -> list[DocBlock]:
    """Every bash block of the documentation, in document order."""
    return [b for path in doc_files() for b in blocks_of(path)]


#: The docs leg runs as two shards side by side, each in its own fresh folder (every doc file reads only what its
#: own blocks wrote): ``LMMBENCH_DOCS_SHARD=first`` runs these files, ``rest`` every other file (a new doc file
#: lands there). The split balances the blocks' run times measured in CI (about 12 minutes each there, beside the
#: version legs).
FIRST_SHARD_FILES = ("README.md", "docs/perf.md", "docs/eval.md", "docs/shapes.md", "docs/serve.md",
                     "docs/ttft-breakdown.md", "docs/prompts.md")  # fmt: skip


def shard_blocks(shard: str | None) -> list[DocBlock]:
    """The blocks of one shard (``first`` / ``rest``), or every block when ``shard`` is None or empty."""
    blocks = all_blocks()
    if not shard:
        return blocks
    if shard not in ("first", "rest"):
        raise ValueError(f"LMMBENCH_DOCS_SHARD={shard!r}: use 'first' or 'rest'")
    return [b for b in blocks if (b.path in FIRST_SHARD_FILES) == (shard == "first")]


@dataclass
class BlockRun:
    """What running one block gave: exit code, output, and processes of its group still alive at its end."""

    returncode: int
    output: str
    left_running: list[str]
    seconds: float


def _group_members(pgid: int) -> list[str]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
            if fields[0] != "Z" and int(fields[2]) == pgid and cmdline:  # empty: a process already exiting
                members.append(cmdline)
        except (OSError, ValueError, IndexError):
            continue
    return members


@contextlib.contextmanager
def ports_held(ports: list[int]) -> Iterator[None]:
    """Hold an exclusive lock per fixed port (in port order: no deadlock) while a block runs, so that the docs
    shards, which run side by side, never start two servers on one documented port at once."""
    import fcntl

    with contextlib.ExitStack() as stack:
        for port in ports:
            handle = stack.enter_context(open(Path(tempfile.gettempdir()) / f"lmmbench-docs-port-{port}.lock", "w"))
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def run_block(block: DocBlock, folder: Path, env: dict[str, str], timeout_s: float) -> BlockRun:
    """Run ``block`` with ``bash -e -o pipefail`` in ``folder``, in its own process group; kill the group after.
    Output goes to a file, not a pipe: a server the block left running holds a pipe open, and the block is over
    when its shell exits, not when every child has closed its output. The block's fixed ports are held while it
    runs (``ports_held``)."""
    with ports_held(block.ports):
        return _run_block(block, folder, env, timeout_s)


def _run_block(block: DocBlock, folder: Path, env: dict[str, str], timeout_s: float) -> BlockRun:

    t0 = time.monotonic()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=folder, env=env, start_new_session=True,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -9
        left = _group_members(proc.pid)
        deadline = time.monotonic() + 20.0  # a server the block stopped as its last line may still be on its way out
        # (seen at 5 s: a loaded machine took longer to finish `lmmbench serve` after its `kill`)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _group_members(proc.pid)
        if left:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                time.sleep(1.0)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.seek(0)
        output = log.read().decode(errors="replace")
    return BlockRun(code, output, left, time.monotonic() - t0)
