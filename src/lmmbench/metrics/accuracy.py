"""Accuracy metrics: one registry, definitions that follow lm-evaluation-harness 0.4.13 exactly.

A metric has a per-sample function (``score(sample) -> value``) and an aggregation over the
per-sample values (``mean``, ``word_perplexity`` ...) plus a standard error. Sample values of the
perplexity family are ``(loglikelihood, weight)`` pairs, aggregated corpus-weighted as
lm-evaluation-harness does: ``exp(-sum LL / sum weight)``.

A sample is a plain mapping (a prediction row): ``loglikelihoods`` (list of floats) and
``gold`` (index) and ``choices`` for multiple choice; ``loglikelihood``, ``words``, ``bytes`` for
rolling perplexity; ``prediction`` and ``references`` (list of str) for generation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry
from lmmbench.metrics.accuracy_text import anls, exact_match, rouge_l, sacre_bleu, token_f1

__all__ = [
    "ACCURACY_METRICS",
    "AccuracyMetric",
    "MetricValue",
    "aggregate_metric",
    "bootstrap_stderr",
    "mean_stderr",
]

SampleValue = Any  # float, or (ll, weight) for the perplexity family, or (pred, refs) for corpus BLEU


@dataclass(frozen=True)
class AccuracyMetric:
    """One metric: per-sample scoring, aggregation, direction."""

    name: str
    kinds: tuple[str, ...]  # request kinds it applies to
    score: Callable[[Mapping[str, Any], Mapping[str, Any]], SampleValue]
    aggregate: Callable[[Sequence[SampleValue]], float]
    higher_is_better: bool = True
    mean_like: bool = True  # the stderr of a mean has a formula; otherwise bootstrap
    unit: str = ""
    #: the name of lm-eval's aggregation this metric equals, when an lm-eval-format task file may use it
    lmeval_aggregation: str | None = None
    #: the largest value one answer can score (None: unbounded, as perplexities)
    top: float | None = 1.0


@dataclass
class MetricValue:
    """An aggregated metric with its standard error and sample count."""

    name: str
    value: float
    stderr: float | None
    n: int
    extra: dict[str, Any] = field(default_factory=dict)


ACCURACY_METRICS: Registry[AccuracyMetric] = Registry("accuracy_metrics")


def _mean(values: Sequence[SampleValue]) -> float:
    return float(sum(float(v) for v in values) / len(values)) if values else float("nan")


def _weighted_perplexity(values: Sequence[SampleValue]) -> float:
    lls = [v[0] for v in values]
    weights = [v[1] for v in values]
    return math.exp(-sum(lls) / sum(weights))


def _bits_per_byte(values: Sequence[SampleValue]) -> float:
    lls = [v[0] for v in values]
    weights = [v[1] for v in values]
    return float(-sum(lls) / sum(weights) / math.log(2))


def _corpus_bleu(values: Sequence[SampleValue]) -> float:
    preds = [v[0] for v in values]
    refs = [v[1] for v in values]
    return sacre_bleu(preds, refs)


def mean_stderr(values: Sequence[float]) -> float | None:
    """Sample standard deviation / sqrt(n), as lm-evaluation-harness's ``mean_stderr``."""
    n = len(values)
    if n < 2:
        return None
    mu = sum(values) / n
    var = sum((x - mu) ** 2 for x in values) / (n - 1)
    return math.sqrt(var) / math.sqrt(n)


def bootstrap_stderr(
    agg: Callable[[Sequence[SampleValue]], float], values: Sequence[SampleValue], iters: int = 1000, seed: int = 0
) -> float | None:
    """Standard deviation of ``agg`` over bootstrap resamples (seeded)."""
    n = len(values)
    if n < 2 or iters < 2:
        return None
    rnd = random.Random(seed)
    stats = []
    for _ in range(iters):
        resample = [values[rnd.randrange(n)] for _ in range(n)]
        try:
            stats.append(agg(resample))
        except (ZeroDivisionError, OverflowError, ValueError):
            continue
    if len(stats) < 2:
        return None
    mu = sum(stats) / len(stats)
    return math.sqrt(sum((x - mu) ** 2 for x in stats) / (len(stats) - 1))


def aggregate_metric(metric: AccuracyMetric, values: Sequence[SampleValue], bootstrap_iters: int = 1000) -> MetricValue:
    """Aggregate per-sample values of ``metric`` with its standard error."""
    if not values:
        return MetricValue(metric.name, float("nan"), None, 0)
    value = metric.aggregate(values)
    if metric.mean_like:
        stderr = mean_stderr([float(v) for v in values])
    else:
        stderr = bootstrap_stderr(metric.aggregate, values, iters=bootstrap_iters)
    return MetricValue(metric.name, value, stderr, len(values))


# ---------------------------------------------------------------- multiple choice


def _argmax_first(xs: Sequence[float]) -> int:
    best = 0
    for i, x in enumerate(xs):
        if x > xs[best]:
            best = i
    return best


def _mc_lls(sample: Mapping[str, Any]) -> list[float]:
    lls = sample.get("loglikelihoods")
    if not isinstance(lls, list) or not lls:
        raise ValueError("no log-likelihoods in this prediction")
    return [float(x) for x in lls]


def _acc(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    if sample.get("kind") == "loglikelihood":  # lm-eval: the continuation is the greedy one
        return 1.0 if all(sample["is_greedy"]) else 0.0
    return 1.0 if _argmax_first(_mc_lls(sample)) == int(sample["gold"]) else 0.0


def _acc_norm(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    lls = _mc_lls(sample)
    lens = [float(len(c)) for c in sample["choices"]]
    return 1.0 if _argmax_first([ll / n for ll, n in zip(lls, lens, strict=True)]) == int(sample["gold"]) else 0.0


# ---------------------------------------------------------------- rolling perplexity and loglikelihood


def _ll(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    return float(_mc_lls(sample)[0])


def _perplexity(values: Sequence[SampleValue]) -> float:
    """lm-eval's ``perplexity`` aggregation: exp(−mean LL)."""
    return math.exp(-_mean(values))


def _word_ppl(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> tuple[float, int]:
    return (float(sample["loglikelihood"]), int(sample["words"]))


def _byte_ppl(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> tuple[float, int]:
    return (float(sample["loglikelihood"]), int(sample["bytes"]))


# ---------------------------------------------------------------- generation


def _refs(sample: Mapping[str, Any]) -> list[str]:
    refs = sample.get("references")
    if isinstance(refs, str):
        return [refs]
    if not isinstance(refs, list) or not refs:
        raise ValueError("no reference answer for this sample")
    return [str(r) for r in refs]


def _pred(sample: Mapping[str, Any]) -> str:
    pred = sample.get("prediction")
    return "" if pred is None else str(pred)


def _exact_match(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    pred = _pred(sample)
    return max(
        exact_match(
            pred,
            ref,
            ignore_case=bool(opts.get("ignore_case", False)),
            ignore_punctuation=bool(opts.get("ignore_punctuation", False)),
            ignore_numbers=bool(opts.get("ignore_numbers", False)),
            regexes_to_ignore=list(opts.get("regexes_to_ignore", []) or []),
        )
        for ref in _refs(sample)
    )


def _f1(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    return max(token_f1(_pred(sample), ref) for ref in _refs(sample))


def _rouge(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    return max(rouge_l(_pred(sample), ref) for ref in _refs(sample))


def _anls(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> float:
    return anls(_pred(sample), _refs(sample), threshold=float(opts.get("threshold", 0.5)))


def _bleu(sample: Mapping[str, Any], opts: Mapping[str, Any]) -> tuple[str, list[str]]:
    return (_pred(sample), _refs(sample))


_MC = ("multiple_choice",)
_LL = ("loglikelihood",)
_ROLL = ("loglikelihood_rolling",)
_GEN = ("generate",)

for _m in (
    AccuracyMetric("acc", (*_MC, *_LL), _acc, _mean, lmeval_aggregation="mean"),
    AccuracyMetric("perplexity", _LL, _ll, _perplexity, False, False, lmeval_aggregation="perplexity", top=None),
    AccuracyMetric("acc_norm", _MC, _acc_norm, _mean, lmeval_aggregation="mean"),
    AccuracyMetric("word_perplexity", _ROLL, _word_ppl, _weighted_perplexity, False, False,
                   lmeval_aggregation="weighted_perplexity", top=None),
    AccuracyMetric("byte_perplexity", _ROLL, _byte_ppl, _weighted_perplexity, False, False,
                   lmeval_aggregation="weighted_perplexity", top=None),
    AccuracyMetric("bits_per_byte", _ROLL, _byte_ppl, _bits_per_byte, False, False, "bits",
                   lmeval_aggregation="bits_per_byte", top=None),
    AccuracyMetric("exact_match", _GEN, _exact_match, _mean, lmeval_aggregation="mean"),
    AccuracyMetric("f1", _GEN, _f1, _mean),
    AccuracyMetric("rougeL", _GEN, _rouge, _mean),
    AccuracyMetric("anls", _GEN, _anls, _mean),
    AccuracyMetric("bleu", _GEN, _bleu, _corpus_bleu, True, False, top=100.0),  # sacreBLEU's 0-100 scale
):
    ACCURACY_METRICS.add(_m.name, _m)


def get_metric(name: str, kind: str, where: str) -> AccuracyMetric:
    """The metric ``name``; an error naming ``where`` if it is unknown or does not fit ``kind``."""
    if name not in ACCURACY_METRICS:
        known = ", ".join(ACCURACY_METRICS.names())
        raise UserError(f"{where}: unknown metric '{name}'; known: {known}")
    metric = ACCURACY_METRICS.get(name)
    if kind not in metric.kinds:
        raise UserError(f"{where}: metric '{name}' applies to {', '.join(metric.kinds)} tasks, not {kind}")
    return metric
