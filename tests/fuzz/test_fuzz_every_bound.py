"""Every bound of the limits table (``lmmbench.config.limits.LIMITS``, docs/reliability.md), one value past it: the
command exits 2 within 5 seconds with one line naming the bound. Each bound is lowered with ``--limit name=B`` so
that B + 1 is a small input (a 64 MiB body or a 2 GiB file would only make the suite slow); the default bounds
themselves are met by the cases of ``test_fuzz_bounds.py`` under a memory limit. The test fails when a bound is
added to the table without a case here."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fuzz_corpus import task_with

from lmmbench.cli.main import main
from lmmbench.config.input_files import raise_csv_field_limit
from lmmbench.config.limits import LIMITS
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import running_testserver
from pacer import MODEL_LIBS, returns_before_pacer

B = 4  # every bound is lowered to this; each case asks for B + 1
PERF = ["perf", "--url", "{url}", "--num-requests", "2", "--output-tokens", "2", "--no-plots", "--no-progress"]
EVAL = ["eval", "--model", "tiny-llm", "--mode", "all", "--limit", "1"]


def _chain(tmp: Path, steps: int) -> Path:
    """A task file whose ``include:`` chain takes ``steps`` steps."""
    for i in range(steps):
        (tmp / f"inc{i}.yaml").write_text(f"include: inc{i + 1}.yaml\n" + ("task: chained\n" if i == 0 else ""))
    (tmp / f"inc{steps}.yaml").write_text("output_type: generate_until\ndataset_path: x\ndoc_to_text: q\n")
    return tmp / "inc0.yaml"


def _files(tmp: Path) -> dict[str, Path]:
    """The small input files of the cases, each one past the bound ``B``."""
    files = {
        "nodes.yaml": "a: [1, 2, 3]\n",  # the mapping, the list and three scalars: 5 nodes
        "depth.yaml": "a: [[[[[1]]]]]\n",  # 5 levels of [ ]
        "aliases.yaml": "x: &x 1\nl: [*x, *x, *x, *x, *x]\n",  # 5 alias references
        "bytes.yaml": "a: 1234\n"[: B + 1],  # 5 bytes
        "hash.jsonl": json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2,
                                  "hash_ids": list(range(B + 1))}) + "\n",
        "field.csv": "id,video,image,audio,prompt\ns1,,,," + "y" * (B + 1) + "\n",
        "batch.json": json.dumps({"model": "m", "tp_sizes": [1], "batch_sizes": [B + 1], "input_tokens": [8],
                                  "perf_time": 1}),
        "prompt.yaml": task_with("y" * (B + 1)),
        "data.jsonl": '{"text": "one", "answer": "a"}\n',
    }
    for name, text in files.items():
        (tmp / name).write_text(text, encoding="utf-8")
    return {name: tmp / name for name in files} | {"chain": _chain(tmp, B + 1)}


N = str(B + 1)
CASES: dict[str, list[str]] = {  # bound -> argv at B + 1 ({f:name} a file of _files, {url} the test server)
    "concurrency": [*PERF, "--concurrency", N],
    "requests": [*PERF[:3], "--num-requests", N],
    "input_tokens": [*PERF, "--input-tokens", N],
    "output_tokens": [*PERF[:5], "--output-tokens", N],
    "batch_size": [*PERF, "--workload", "{f:batch.json}"],
    "sweep_points": [*PERF, "--rates", ",".join(str(i + 1) for i in range(B + 1))],
    "file_bytes": [*PERF, "--config", "{f:bytes.yaml}"],
    "yaml_nodes": [*PERF, "--config", "{f:nodes.yaml}"],
    "yaml_depth": [*PERF, "--config", "{f:depth.yaml}"],
    "yaml_aliases": [*PERF, "--config", "{f:aliases.yaml}"],
    "csv_field_bytes": [*PERF, "--dataset", "multimodal", "--dataset-path", "{f:field.csv}"],
    "prompt_chars": [*EVAL, "--tasks", "{f:prompt.yaml}"],
    "media_seconds": ["media", "synth", "--video-seconds", N],
    "image_side": ["media", "synth", "--image-sizes", "32"],
    "duration_s": [*PERF[:3], "--duration-s", N],
    "hash_ids": [*PERF, "--dataset", "trace", "--dataset-path", "{f:hash.jsonl}"],
    "episodes": ["run", "episodic-eval", "--num-tasks", N, "--num-trials-per-task", "1"],
    "include_depth": [*EVAL, "--tasks", "{f:chain}"],
    "episode_steps": ["run", "episodic-eval", "--num-tasks", "1", "--num-trials-per-task", "1", "--max-steps", N],
    "body_bytes": [],  # a server's bound: answered with HTTP 413, below (the proxy's: tests/serve/test_proxy_inputs.py)
    "json_depth": [],  # the proxy's bounds on one request: HTTP 400 / 502 with the bound named, and requests
    "answer_index": [],  # that fail with the bound as their cause (perf's client: error kinds), not exit 2:
    "answer_bytes": [],  # tests/serve/test_proxy_inputs.py and test_proxy_misbehaving.py meet each one past
    "sse_line_bytes": [],  # it; tests/perf/test_stream_parsing.py the SSE reader's two
    "sse_idle_s": [],
    "stop_grace_s": [],  # a time bound, not an input's: tests/reliability/test_plan_interrupt.py kills past it
    "venvs_kept": [],  # bounds of a cache, not an input's: tests/plans/test_venv_cache.py builds and prunes past
    "venvs_bytes": [],  # them, and refuses a bad value in one line (test_bad_options_are_one_line_and_exit_2)
    "built_images": [],  # a plan's container rows: tests/plans/test_container.py builds one past it
}
#: Every bound is refused before a pacer of this many fresh imports of transformers finishes (tests/pacer.py): the
#: command's own first imports (torch among them, when it is the first in its process; an eval renders its first
#: prompt before the model loads) and the check; reading or building past the bound would lose the race.
PACER_IMPORTS = 3
LOWERED = {"image_side": 31}  # media synth refuses sides under 28 pixels before the bound: 31 and 32 here


def test_every_bound_of_the_table_has_a_case() -> None:
    assert set(CASES) == set(LIMITS), f"bounds without a case: {set(LIMITS) - set(CASES)}"


@pytest.fixture
def lowered(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, int], None]]:
    """Set one bound for this test only (``--limit`` writes the process environment: restored after)."""

    def lower(name: str, value: int) -> None:
        monkeypatch.setenv(LIMITS[name].env_var, str(value))

    yield lower
    monkeypatch.undo()
    raise_csv_field_limit()  # the csv module's field limit is process-wide: back to the table's


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", [n for n in CASES if CASES[n]])
def test_one_past_each_bound_exits_2_before_the_pacer(
    name: str, fuzz_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    lowered: Callable[[str, int], None], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    files = _files(tmp_path)
    monkeypatch.chdir(tmp_path)  # the eval task's data file is next to it
    (tmp_path / "data.jsonl").write_text('{"text": "one", "answer": "a"}\n')
    bound = LOWERED.get(name, B)
    lowered(name, bound)  # the environment variable; the --limit option is the same switch (test_limits.py)
    args = []
    for a in CASES[name]:
        for key, path in files.items():
            a = a.replace(f"{{f:{key}}}", str(path))
        args.append(a.replace("{url}", fuzz_url))
    argv = ["--limit", f"{name}={bound}", *args, "--out-dir", str(tmp_path / "out")]
    code, quickly = returns_before_pacer(lambda: main(argv), imports=PACER_IMPORTS, module=MODEL_LIBS)
    text = capsys.readouterr().err
    err = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2 and quickly, (code, text[-2000:])
    assert len(err) == 1 and (f"limit {name}" in err[0] or LIMITS[name].env_var in err[0]), text[-2000:]
    assert "Traceback" not in text


@pytest.mark.timeout(60)
def test_one_byte_past_the_body_bound_is_413(lowered: Callable[[str, int], None]) -> None:
    """testserver's body bound: a body of B + 1 bytes is refused with 413, one of B bytes is read."""
    lowered("body_bytes", 64)
    with running_testserver(TestServerConfig(port=free_loopback_port())) as url:  # the child reads the bound
        def post(n: int) -> int:
            req = urllib.request.Request(f"{url}/v1/completions", data=b" " * n, method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return int(resp.status)
            except urllib.error.HTTPError as exc:
                return int(exc.code)

        assert post(65) == 413
        assert post(64) != 413  # not valid JSON: refused for that (4xx), not for its size
