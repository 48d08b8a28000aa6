"""Text-matching metrics for generated answers: exact match, token F1, ROUGE-L, ANLS, BLEU.

``exact_match`` follows lm-evaluation-harness's ``exact_match`` (HF ``evaluate`` semantics: regexes
removed first, then case, punctuation and digits). ``token_f1`` is SQuAD's F1 (lower case, drop
punctuation and articles, split on whitespace). ``rouge_l`` is the LCS F-measure over whitespace
tokens. ``anls`` is the DocVQA Average Normalised Levenshtein Similarity with threshold 0.5.
``sacre_bleu`` is sacrebleu's corpus BLEU (sacrebleu imported on use).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence
from typing import Any

__all__ = ["anls", "exact_match", "levenshtein", "normalize_squad", "rouge_l", "sacre_bleu", "token_f1"]

_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_DIGIT_TABLE = str.maketrans("", "", string.digits)


def exact_match(
    prediction: str,
    reference: str,
    *,
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
    ignore_numbers: bool = False,
    regexes_to_ignore: Sequence[str] = (),
) -> float:
    """1.0 if the normalised prediction equals the normalised reference."""
    for pattern in regexes_to_ignore:
        prediction = re.sub(pattern, "", prediction)
        reference = re.sub(pattern, "", reference)
    if ignore_case:
        prediction, reference = prediction.lower(), reference.lower()
    if ignore_punctuation:
        prediction, reference = prediction.translate(_PUNCT_TABLE), reference.translate(_PUNCT_TABLE)
    if ignore_numbers:
        prediction, reference = prediction.translate(_DIGIT_TABLE), reference.translate(_DIGIT_TABLE)
    return 1.0 if prediction == reference else 0.0


def normalize_squad(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD token-level F1 between a prediction and one reference."""
    pred_toks = normalize_squad(prediction).split()
    ref_toks = normalize_squad(reference).split()
    if not pred_toks or not ref_toks:
        return float(pred_toks == ref_toks)
    common = collections.Counter(pred_toks) & collections.Counter(ref_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_toks)
    recall = same / len(ref_toks)
    return 2 * precision * recall / (precision + recall)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (beta 1) on lower-cased whitespace tokens."""
    p = prediction.lower().split()
    r = reference.lower().split()
    if not p or not r:
        return float(p == r)
    lcs = _lcs(p, r)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(p), lcs / len(r)
    return 2 * precision * recall / (precision + recall)


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Edit distance between two sequences (characters of strings, or words of lists)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def anls(prediction: str, references: Sequence[str], threshold: float = 0.5) -> float:
    """Best normalised Levenshtein similarity over the references, 0 below ``threshold``."""
    pred = " ".join(prediction.strip().lower().split())
    best = 0.0
    for ref in references:
        gt = " ".join(ref.strip().lower().split())
        longest = max(len(pred), len(gt))
        nl = 0.0 if longest == 0 else levenshtein(pred, gt) / longest
        best = max(best, 1.0 - nl if nl < threshold else 0.0)
    return best


def sacre_bleu(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """sacrebleu corpus BLEU; each prediction may have several references."""
    import sacrebleu

    n_refs = max(len(r) for r in references)
    ref_streams = [[r[i] if i < len(r) else r[0] for r in references] for i in range(n_refs)]
    return float(sacrebleu.corpus_bleu(list(predictions), ref_streams).score)
