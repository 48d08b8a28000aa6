"""Accuracy metrics: lm-evaluation-harness definitions on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from lmmbench.core.errors import UserError
from lmmbench.metrics.accuracy import ACCURACY_METRICS, aggregate_metric, get_metric, mean_stderr
from lmmbench.metrics.accuracy_text import anls, exact_match, rouge_l, sacre_bleu, token_f1


def _score(name: str, sample: dict[str, object], **opts: object) -> object:
    return ACCURACY_METRICS.get(name).score(sample, opts)


def test_acc_and_acc_norm_follow_lm_eval_including_ties() -> None:
    # acc: argmax LL; acc_norm: argmax LL / len(choice in characters); ties go to the first
    sample = {"loglikelihoods": [-4.0, -6.0], "choices": ["ab", "abcdef"], "gold": 1}
    assert _score("acc", sample) == 0.0  # -4 > -6
    assert _score("acc_norm", sample) == 1.0  # -2.0 < -1.0
    tie = {"loglikelihoods": [-1.0, -1.0], "choices": ["a", "b"], "gold": 1}
    assert _score("acc", tie) == 0.0


def test_perplexities_are_corpus_weighted() -> None:
    docs = [{"loglikelihood": -10.0, "words": 2, "bytes": 10}, {"loglikelihood": -30.0, "words": 8, "bytes": 20}]
    for name, expected in (
        ("word_perplexity", math.exp(40 / 10)),
        ("byte_perplexity", math.exp(40 / 30)),
        ("bits_per_byte", 40 / 30 / math.log(2)),
    ):
        m = ACCURACY_METRICS.get(name)
        value = aggregate_metric(m, [m.score(d, {}) for d in docs]).value
        assert value == pytest.approx(expected, rel=1e-12)
    # not the mean of per-document perplexities
    assert math.exp(40 / 10) != pytest.approx((math.exp(5) + math.exp(30 / 8)) / 2)


def test_mean_stderr_is_sample_std_over_sqrt_n() -> None:
    values = [1.0, 0.0, 1.0, 1.0]
    mu = 0.75
    expected = math.sqrt(sum((x - mu) ** 2 for x in values) / 3) / 2
    assert mean_stderr(values) == pytest.approx(expected)
    assert mean_stderr([1.0]) is None


def test_exact_match_options() -> None:
    assert exact_match("Paris.", "paris") == 0.0
    assert exact_match("Paris.", "paris", ignore_case=True, ignore_punctuation=True) == 1.0
    assert exact_match("answer: 42", "42", regexes_to_ignore=["answer: "]) == 1.0
    assert exact_match("a1b2", "ab", ignore_numbers=True) == 1.0
    sample = {"prediction": "Five", "references": ["5", "five"]}
    assert _score("exact_match", sample, ignore_case=True) == 1.0


def test_f1_rouge_anls_bleu() -> None:
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(2 * (2 / 2) * (2 / 3) / (1 + 2 / 3))
    assert rouge_l("a b c d", "a c d") == pytest.approx(2 * 0.75 * 1.0 / 1.75)
    assert anls("hello", ["hello"]) == 1.0
    assert anls("hellx", ["hello"]) == pytest.approx(0.8)
    assert anls("xyz", ["hello"]) == 0.0
    assert sacre_bleu(["the cat sat on the mat"], [["the cat sat on the mat"]]) == pytest.approx(100.0)


def test_unknown_or_misplaced_metric_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="unknown metric 'nope'"):
        get_metric("nope", "generate", "t.yaml")
    with pytest.raises(UserError, match="applies to multiple_choice"):
        get_metric("acc", "generate", "t.yaml")
