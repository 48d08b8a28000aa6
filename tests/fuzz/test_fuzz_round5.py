"""Generators for the classes of bad input round 5 found (issue 62), each drawing its own hostile inputs from a seeded
generator rather than the cases users met (those are in tests/reliability/test_bad_input_round5.py):

- numbers that would reach an integer conversion or a schedule unbounded (non-finite, negative, vanishingly
  small, past a metric's range) through every flag of that class;
- ``KEY=VALUE`` pair options with a key given twice or a URL without its key;
- misspelt ``LMMBENCH_LIMIT_*`` variables;
- a URL's user info (any characters, percent-encoded or not) in ``--url`` and ``--upstream``: never printed.

Each draw is exit 2, one ``error:`` line naming the flag or variable, no traceback and no crash file."""

from __future__ import annotations

import os
import random
import string
from collections.abc import Callable
from pathlib import Path

import pytest

from lmmbench.cli.main import main
from lmmbench.config.limits import LIMITS
from lmmbench.core.net import free_loopback_port
from lmmbench.testing import build_word_tokenizer

SEED = 62


def _tok(tmp: Path) -> str:
    return str(build_word_tokenizer(tmp / "tok", []))


def _hostile(rng: random.Random, *, tiny: bool = False, above: float | None = None) -> str:
    """One number no check may let through: non-finite, negative, past ``above``, or (``tiny``) vanishing."""
    kinds = ["nan", "inf", "-inf", "1e999", f"-{rng.randint(1, 10**6)}", f"-1e{rng.randint(-300, 300)}"]
    if tiny:
        kinds.append(f"1e-{rng.randint(12, 320)}")
    if above is not None:
        kinds.append(f"{above * (1 + rng.random() * 10 ** rng.randint(0, 300)):.6g}")
    return rng.choice(kinds)


NUMBER_FLAGS: dict[str, Callable[[Path, random.Random], tuple[list[str], str]]] = {
    "eval --limit": lambda t, r: (["eval", "--model", "tiny-llm", "--tasks", "sample_qa", "--limit", _hostile(r),
                                   "--out-dir", str(t / "o")], "limit"),
    "runs compare --threshold": lambda t, r: (["runs", "compare", "a", "b", "--threshold",
                                               f"ttft_ms={_hostile(r)}"], "--threshold"),
    "bench sglang --ready-check-timeout-sec": lambda t, r: (
        ["bench", "sglang", "--port", "9", "--tokenizer", _tok(t), "--dataset-name", "random", "--num-prompts", "2",
         "--ready-check-timeout-sec", r.choice(["-1", f"-{r.randint(2, 10**9)}", "1e999"])],
        "--ready-check-timeout-sec"),
    "bench serve --request-rate": lambda t, r: (
        ["bench", "serve", "--base-url", "http://127.0.0.1:9", "--model", "m", "--tokenizer", _tok(t),
         "--random-input-len", "6", "--random-output-len", "3", "--num-prompts", str(r.randint(2, 50)),
         "--request-rate", r.choice(["nan", "0", f"-{r.randint(1, 99)}", f"1e-{r.randint(12, 320)}"])],
        "--request-rate"),
    "perf --correct-if": lambda t, r: (
        ["perf", "--url", "http://127.0.0.1:9", "--tasks", "sample_qa", "--score", "--correct-if",
         f"exact_match>={_hostile(r, above=1.0).lstrip('-')}", "--out-dir", str(t / "o")], "--correct-if"),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    logs = Path(os.environ["LMMBENCH_HOME"]) / "logs"
    crashes = set(logs.glob("crash-*")) if logs.is_dir() else set()
    code = main(argv)
    out = capsys.readouterr()
    assert (set(logs.glob("crash-*")) if logs.is_dir() else set()) == crashes, out.err[-2000:]
    return code, out.out + out.err


def _one_line(code: int, text: str, named: str) -> None:
    errors = [x for x in text.splitlines() if x.startswith("error:")]
    assert code == 2 and len(errors) == 1 and named in errors[0] and "Traceback" not in text, text[-2000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flag", sorted(NUMBER_FLAGS))
def test_generated_hostile_numbers_are_refused_before_any_conversion(flag: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(f"{SEED}-{flag}")
    for i in range(4):
        argv, named = NUMBER_FLAGS[flag](tmp_path / str(i), rng)
        code, text = _run(argv, capsys)
        _one_line(code, text, named)


@pytest.mark.timeout(120)
def test_generated_pair_options_with_a_twice_given_key_or_a_bare_url_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    rng = random.Random(SEED)
    for _ in range(6):
        key = rng.choice(["ttft_ms", "tpot_ms", "acc", "e2e_ms"])
        pairs = [f"{k}={rng.randint(1, 50)}" for k in rng.sample(["qps", "itl_ms", "goodput"], 2)]
        pairs.insert(rng.randint(0, 2), f"{key}={rng.randint(1, 50)}")
        pairs.insert(rng.randint(0, 3), f"{key}={rng.randint(1, 50)}")
        code, text = _run(["runs", "compare", "a", "b", "--threshold", ",".join(pairs)], capsys)
        _one_line(code, text, f"'{key}' is given twice")
        name = "".join(rng.choices(string.ascii_lowercase, k=5))
        urls = [f"{name}=http://127.0.0.1:{rng.randint(1, 65535)}",
                f"{rng.choice(['http', 'https'])}://127.0.0.1:{rng.randint(1, 65535)}/v1"]  # fmt: skip
        rng.shuffle(urls)
        code, text = _run(["perf", "--tasks", "sample_qa", "--models", ",".join(urls)], capsys)
        _one_line(code, text, "expected KEY=VALUE")


def _misspelt(rng: random.Random, name: str) -> str:
    i = rng.randrange(len(name))
    edit = rng.choice(["drop", "double", "swap", "suffix"])
    if edit == "drop":
        name = name[:i] + name[i + 1 :]
    elif edit == "double":
        name = name[:i] + name[i] + name[i:]
    elif edit == "swap" and i + 1 < len(name) and name[i] != name[i + 1]:
        name = name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    else:
        name += "S"
    return name


@pytest.mark.timeout(120)
def test_generated_misspellings_of_limit_variables_are_refused(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    known = {lim.name.upper() for lim in LIMITS.values()}
    tried = 0
    while tried < 8:
        name = _misspelt(rng, rng.choice(sorted(known)))
        if name in known:
            continue
        tried += 1
        var = f"LMMBENCH_LIMIT_{name}"
        monkeypatch.setenv(var, str(rng.randint(1, 10**6)))
        code, text = _run(["runs", "list"], capsys)
        _one_line(code, text, var)
        monkeypatch.delenv(var)


def _secret(rng: random.Random) -> tuple[str, str]:
    """(password as written in the URL, the password itself): letters, digits and characters that need encoding."""
    plain = "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(6, 14)))
    odd = rng.choice(["", "%40", "%3A", "%2F", "-_.~"])
    raw = plain + odd
    from urllib.parse import unquote

    return raw, unquote(raw)


@pytest.mark.timeout(300)
def test_generated_user_info_is_never_printed_nor_taken_as_a_host(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    for i in range(4):
        written, password = _secret(rng)
        user = "".join(rng.choices(string.ascii_lowercase, k=5))
        url = f"http://{user}:{written}@127.0.0.1:{free_loopback_port()}"
        for argv in (["proxy", "--upstream", url + rng.choice(["", "/v1"]), "--port", "0"],
                     ["perf", "--url", url, "--model", "m", "--num-requests", "1", "--wait-for-server", "0.5",
                      "--no-plots", "--out-dir", str(tmp_path / str(i))]):  # fmt: skip
            code, text = _run(argv, capsys)
            assert code == 2 and "Traceback" not in text, text[-2000:]
            assert written not in text and password not in text and f"{user}:" not in text, text[-2000:]
            assert "127.0.0.1" in text and "Name or service not known" not in text, text[-2000:]


def _bad_return(rng: random.Random, i: int) -> tuple[str, str]:
    """(a Python expression a policy's infer() returns, what the error names): drawn from the shapes a policy
    must not return on the 2-wide toy environment."""
    width = rng.choice([1, 3, 7, 32, rng.randint(4, 64)])
    horizon = rng.randint(1, 8)
    key = rng.choice(["action", "act", "a", "Actions", "output"])
    draws = [
        (f"np.zeros(({horizon}, {width}))", f"got {width}"),  # each action of the chunk is stepped
        (f"np.zeros((1, {horizon}, 2))", "for one observation"),
        (f"{{'{key}': np.zeros(2)}}", "no 'actions'"),
        (rng.choice(["None", "'left'", "b'x'"]), "a policy returns actions"),
        (f"[['x'] * {width}]", "a policy returns actions"),
    ]
    return draws[i % len(draws)]  # every shape of the class, its sizes and names drawn


@pytest.mark.timeout(300)
def test_generated_bad_policy_outputs_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(SEED)
    for i in range(6):
        expr, named = _bad_return(rng, i)
        mod = tmp_path / f"p{i}.py"
        mod.write_text(f"import numpy as np\n\n\nclass P:\n    def infer(self, obs):\n        return {expr}\n")
        code, text = _run(["run", "episodic-eval", "--policy", f"{mod}:P", "--num-tasks", "1",
                           "--num-trials-per-task", "1", "--num-steps-wait", "0", "--no-progress", "--out-dir",
                           str(tmp_path / f"o{i}")], capsys)  # fmt: skip
        _one_line(code, text, named)
