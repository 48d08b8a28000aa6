"""`reference compare` through the backend under test: any registered in-process engine (logits and token diff
against injected offsets and divergences) and an OpenAI-compatible server (logprob_diff against the test
server's injected shift and divergence)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from lmmbench.cli.main import main
from lmmbench.config.perf.testserver import TestServerConfig
from lmmbench.core.net import free_loopback_port
from lmmbench.engines.engine_registry import ENGINES
from lmmbench.engines.transformers_engine import TransformersEngine
from lmmbench.testing.fixtures import running_testserver, server_received

SHIFT = 0.25  # added to every logit by the "offset" engine
DIVERGE_STEP = 2  # where the "diverging" engine (and the test server) pick another token


class _Injected(TransformersEngine):
    """tiny-llm's engine with injected ground truth: a constant added to every logit, or from decode step
    ``DIVERGE_STEP`` on the runner-up token boosted above the best one."""

    shift = 0.0
    diverge = False

    def __init__(self, loaded: Any) -> None:
        super().__init__(loaded)
        self.decodes: dict[str, int] = {}

    def prefill(self, states: Any) -> Any:
        return super().prefill(states) + self.shift

    def decode(self, states: Any) -> Any:
        logits = super().decode(states) + self.shift
        for row, s in enumerate(states):
            n = self.decodes[s.request_id] = self.decodes.get(s.request_id, 0) + 1
            if self.diverge and n >= DIVERGE_STEP:  # decode call n gives step n's logits
                second = int(logits[row].topk(2).indices[1])
                logits[row, second] = logits[row].max() + 100.0
        return logits


def _factory(shift: float, diverge: bool) -> Any:
    def make(model: str, device: str = "cpu", dtype: str = "float32") -> _Injected:
        from lmmbench.models import load_model

        engine = _Injected(load_model(model, device=device, dtype=dtype))
        engine.shift, engine.diverge = shift, diverge
        return engine

    return make


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for name, shift, diverge in (("offset-test", SHIFT, False), ("diverging-test", 0.0, True)):
        if name not in ENGINES.names():
            ENGINES.register(name)(_factory(shift, diverge))
    out = tmp_path_factory.mktemp("ref")
    prompts = out / "prompts.csv"
    prompts.write_text("id,question,A,B\n" + "".join(f"{i},what is {i} plus {i},{i},{2 * i}\n" for i in range(6)))
    assert main(["reference", "dump", "--model", "tiny-llm", "--prompts", str(prompts), "--token-diff-prompts",
                 "4", "--max-new-tokens", "5", "--top-k", "5", "--threads", "1", "--out", str(out / "dump")]) == 0
    return out / "dump"


def _compare(args: list[str], out: Path) -> dict[str, Any]:
    assert main(["reference", "compare", *args, "--out-dir", str(out)]) == 0
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return report


def test_dump_counts_are_said_and_every_prompt_generates(reference: Path) -> None:
    meta = json.loads((reference / "reference.json").read_text())
    assert meta["counts"] == {"available": 6, "logits_diff": 6, "token_diff": 4}  # fewer than 52 / 16 exist: all
    # every prompt generates: ByteMLPerf's PPL averages over each prompt's generated steps
    assert [len(p["generated_ids"]) for p in meta["prompts"]] == [5, 5, 5, 5, 5, 5]
    assert all(len(step) == 5 for p in meta["prompts"] for step in p["top_logprobs"])  # --top-k 5
    assert meta["prompts"][0]["prompt"] == "what is 0 plus 0\nA. 0\nB. 0\n答案："  # ByteMLPerf's template


def test_engine_offset_gives_exactly_the_injected_logits_diff(reference: Path, tmp_path: Path) -> None:
    acc = _compare(["--model", "tiny-llm", "--engine", "offset-test", "--reference", str(reference),
                    "--threads", "1"], tmp_path)["Accuracy"]  # fmt: skip
    ld, td = acc["Logits Diff"], acc["Token Diff"]
    # x + 0.25 in float32 is off by at most an ULP of |x| (tiny-llm's logits are below 64: 4e-6)
    assert ld["Max Difference"] == pytest.approx(SHIFT, abs=1e-5) and ld["Mean Absolute Error"] == pytest.approx(
        SHIFT, abs=1e-5)  # fmt: skip
    assert ld["Mean Squared Error"] == pytest.approx(SHIFT**2, abs=1e-5) and ld["Cosine Similarity"] < 1.0
    assert ld["Prompt Num"] == 6 and td["Prompt Num"] == 4
    assert td["Max Difference"] == pytest.approx(SHIFT, abs=1e-5) and td["First Divergence"] == []  # argmax kept
    assert td["Steps Compared"] == 4 * 5
    assert sorted(p.name for p in (tmp_path / "token_diff").iterdir()) == [f"prompt_{i}.png" for i in range(4)]
    # perplexity does not move with a constant shift of the logits (softmax is shift-invariant)
    assert acc["PPL"] == pytest.approx(acc["Reference PPL"], rel=1e-4)
    assert acc["Prompt Counts"]["token_diff"] == 4 and "52" in acc["Prompt Counts"]["note"]


def test_engine_divergence_is_reported_at_its_step(reference: Path, tmp_path: Path) -> None:
    acc = _compare(["--model", "tiny-llm", "--engine", "diverging-test", "--reference", str(reference),
                    "--threads", "1"], tmp_path)["Accuracy"]  # fmt: skip
    td = acc["Token Diff"]
    assert [(d["prompt"], d["step"]) for d in td["First Divergence"]] == [(i, DIVERGE_STEP) for i in range(4)]
    assert all(d["generated"] != d["reference"] for d in td["First Divergence"])
    assert td["Steps Compared"] == 4 * 5  # ByteMLPerf compares every step, after the divergence too
    assert acc["Logits Diff"]["Max Difference"] == 0.0  # the prefill is untouched
    assert td["Max Difference"] > 50  # the boosted runner-up's logit


def test_url_logprob_diff_reports_the_server_s_injected_shift_and_divergence(reference: Path, tmp_path: Path) -> None:
    cfg = TestServerConfig(port=free_loopback_port(), model="tiny-llm", logprobs_reference=reference,
                           logprob_shift=0.125, diverge_at_step=DIVERGE_STEP)  # fmt: skip
    with running_testserver(cfg) as url:
        report = _compare(["--url", url, "--reference", str(reference)], tmp_path)
        sent = server_received(url)
    acc = report["Accuracy"]
    assert acc["Logits Diff"] is None and acc["Token Diff"] is None  # no logits over HTTP
    # ByteMLPerf's PPL from the server's numbers: its prompt scoring (every log-prob shifted by 0.125) and its
    # generated tokens' log-probs (the best token's, shifted, then the runner-up's from step DIVERGE_STEP on);
    # step g scores the prompt's tokens 1.. and the first g generated ones, exp of the mean, averaged over g
    meta = json.loads((reference / "reference.json").read_text())
    for got, rec in zip(acc["PPL"], meta["prompts"], strict=True):
        lps = [x + 0.125 for x in rec["prompt_logprobs"]]
        gen = [top[1 if s >= DIVERGE_STEP else 0][1] + 0.125 for s, top in enumerate(rec["top_logprobs"])]
        steps = [math.exp(-(sum(lps) + sum(gen[:g])) / (len(lps) + g)) for g in range(len(gen))]
        assert got == pytest.approx(sum(steps) / len(steps), rel=1e-9)
    assert acc["null_reason"]["Logits Diff"].startswith("a server returns top-k log-probabilities")
    assert acc["topk_logprob_max_diff"] == pytest.approx(0.125)  # lmmbench's, under its own name
    assert acc["topk_logprob_cosine"] is not None and acc["topk_logprob_cosine"] < 1.0
    lp = acc["logprob_diff"]
    assert lp["k"] == 5
    assert lp["first_step"]["prompts"] == 6 and lp["first_step"]["values_compared"] == 6 * 5
    assert lp["first_step"]["max_abs_diff"] == pytest.approx(0.125) and lp["first_step"]["mae"] == pytest.approx(
        0.125)  # fmt: skip
    per = lp["per_step"]
    assert per["prompts"] == 4 and per["values_compared"] == 4 * 5 * (DIVERGE_STEP + 1)
    assert [(d["prompt"], d["step"]) for d in per["first_divergence"]] == [(i, DIVERGE_STEP) for i in range(4)]
    assert report["Backend"] == url
    bodies = [r["body"] for r in sent if not r["body"].get("echo")]
    assert len(bodies) == 6 and all(b["logprobs"] == 5 and b["temperature"] == 0 for b in bodies)
    assert [b["max_tokens"] for b in bodies] == [5, 5, 5, 5, 5, 5]
    assert sum(1 for r in sent if r["body"].get("echo")) == 6  # one scoring request per prompt


def test_url_refuses_in_process_options(reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reference", "compare", "--url", "http://127.0.0.1:9", "--dtype", "bfloat16", "--reference",
                 str(reference), "--out-dir", str(tmp_path)]) == 2  # fmt: skip
    assert "--url" in capsys.readouterr().err
