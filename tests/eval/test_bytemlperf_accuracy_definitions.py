"""ByteMLPerf's accuracy definitions on a 2-prompt fixture, the expected values worked by hand below, beside what
ByteMLPerf's reporter (``llm_perf/utils/reporter.py``, ``calc_logits_diff`` / ``calc_token_diff`` /
``_calc_accuracy``; its server's per-step PPL in ``llm_perf/core/scheduler.py``) gives for the same arrays, its
formulas as read applied with numpy here (not lmmbench's code)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmmbench.evaluation.reference.bytemlperf_metrics import logits_diff, prompt_ppl, token_diff, topk_first_step
from lmmbench.evaluation.reference.prompts import load_prompts

# prompt 0: first-token logits here / reference; prompt 1 likewise (vocabulary of 3)
REF = [[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]]
HERE = [[1.0, 2.0, 2.0], [0.0, 2.0, 0.0]]


def test_ppl_is_averaged_per_prompt_over_the_generated_steps() -> None:
    # prompt tokens 1..2 scored -1 and -2; three generated tokens scored -0.5, -1.5, -0.1 (the last never scored)
    # step 0: exp(3 / 2); step 1: exp((3 + 0.5) / 3); step 2: exp((3 + 0.5 + 1.5) / 4)
    by_hand = (math.exp(1.5) + math.exp(3.5 / 3) + math.exp(1.25)) / 3
    assert prompt_ppl([-1.0, -2.0], [-0.5, -1.5, -0.1]) == pytest.approx(by_hand, rel=1e-12)
    # ByteMLPerf's scheduler: at step g, CrossEntropy over the prompt + g generated tokens, exp; the reporter: mean
    tokens = [-1.0, -2.0, -0.5, -1.5]
    steps = [math.exp(-np.mean(tokens[: 2 + g])) for g in range(3)]
    assert prompt_ppl([-1.0, -2.0], [-0.5, -1.5, -0.1]) == pytest.approx(sum(steps) / len(steps), rel=1e-12)
    # not the prompt's own perplexity, which is exp(1.5) = 4.48...
    assert by_hand < math.exp(1.5) - 0.5
    assert prompt_ppl([], [-0.5]) is None  # a one-token prompt: nothing to score at step 0


def test_logits_diff_cosine_is_per_prompt_then_averaged() -> None:
    got = logits_diff(np.array(HERE), np.array(REF))
    # prompt 0: d = [0, 0, 1]; prompt 1: d = [0, -1, 0]: max 1, MSE 1/3 and 1/3, MAE 1/3 and 1/3
    # cosines: (1 + 4 + 6) / (sqrt(14) * sqrt(9)) = 11 / (3 sqrt 14), and 2 / (1 * 2) = 1
    assert got["Max Difference"] == 1.0
    assert got["Mean Squared Error"] == pytest.approx(1 / 3, rel=1e-12)
    assert got["Mean Absolute Error"] == pytest.approx(1 / 3, rel=1e-12)
    assert got["Cosine Similarity"] == pytest.approx((11 / (3 * math.sqrt(14)) + 1) / 2, rel=1e-12)
    assert got["Prompt Num"] == 2
    # one global cosine over both prompts would be 13 / sqrt(15 * 13): a different number
    assert abs(got["Cosine Similarity"] - 13 / math.sqrt(15 * 13)) > 1e-3
    # ByteMLPerf's reporter, as read: per prompt max / mse / mae / np.dot / norms, then max and np.mean
    per = []
    for r, h in zip(np.array(REF), np.array(HERE), strict=True):
        d = r - h
        per.append((np.max(np.abs(d)), np.mean(np.square(d)), np.mean(np.abs(d)),
                    np.dot(r, h) / (np.linalg.norm(r) * np.linalg.norm(h))))  # fmt: skip
    assert got["Max Difference"] == pytest.approx(float(np.max([p[0] for p in per])), rel=1e-12)
    assert got["Mean Squared Error"] == pytest.approx(float(np.mean([p[1] for p in per])), rel=1e-12)
    assert got["Mean Absolute Error"] == pytest.approx(float(np.mean([p[2] for p in per])), rel=1e-12)
    assert got["Cosine Similarity"] == pytest.approx(float(np.mean([p[3] for p in per])), rel=1e-12)


def test_token_diff_is_the_largest_max_logit_difference_over_the_first_16_prompts() -> None:
    # prompt 0: per-step max logits 3.0, 2.5 here, 3.0, 2.0 there: differences 0, 0.5
    # prompt 1: one step here, two there: another shape, skipped as ByteMLPerf skips it
    got, diffs = token_diff([[3.0, 2.5], [1.0]], [[3.0, 2.0], [1.5, 0.7]])
    assert got == {"Max Difference": 0.5, "Prompt Num": 1} and diffs == [[0.0, 0.5]]
    many, _ = token_diff([[1.0]] * 20, [[1.25]] * 20)
    assert many == {"Max Difference": 0.25, "Prompt Num": 16}  # the reporter's max_token_diff_num


def test_topk_stand_ins_carry_names_of_their_own() -> None:
    # prompt 0: tokens both lists hold: (-1, -1.5) and (-2, -2); prompt 1: (-0.5, -0.5)
    got = topk_first_step([[(-1.0, -1.5), (-2.0, -2.0)], [(-0.5, -0.5)]])
    assert got["topk_logprob_max_diff"] == 0.5
    # cosine of (-1, -2) and (-1.5, -2): (1.5 + 4) / (sqrt(5) * 2.5); prompt 1: 1
    assert got["topk_logprob_cosine"] == pytest.approx((5.5 / (math.sqrt(5) * 2.5) + 1) / 2, rel=1e-12)
    assert got["values_compared"] == 3 and got["prompts"] == 2


def test_prompts_follow_bytemlperfs_template(tmp_path: object) -> None:
    from pathlib import Path

    csv = Path(str(tmp_path)) / "q.csv"
    row = "0,最早向中国介绍西方进化论的是____,严复,梁启超,康有为,谭嗣同"  # merged_52_test.csv's first row
    csv.write_text(f"id,question,A,B,C,D\n{row}\n", encoding="utf-8")
    # bench.py format_question: question, then "\n{choice}. {text}" for A..D, then "\n答案："
    want = "最早向中国介绍西方进化论的是____\nA. 严复\nB. 梁启超\nC. 康有为\nD. 谭嗣同\n答案："
    assert load_prompts(str(csv), 52) == [want]
