"""Reading a choice or a short answer out of generated text, as lmms-eval 0.7.3 does per benchmark.

MMMU's parsers come from the MMMU authors' evaluation code (multiple choice: bracketed letter, then
letter followed by a space, then letter with a period, then the option's text in a long answer; open
questions: key sub-responses after "is", "so", "=" ..., numbers extracted, strings lower-cased).
``extract_mcq_letter`` is lmms-eval's ranked multiple-choice extraction used by Video-MME.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

__all__ = [
    "ai2d_filter",
    "eval_mmmu_open",
    "extract_mcq_letter",
    "mmmu_choice_info",
    "parse_mmmu_choice",
    "parse_mmmu_open",
    "scienceqa_correct",
]

_EDGE_PUNCT = [",", ".", "!", "?", ";", ":", "'"]


def mmmu_choice_info(options: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """(letter -> option text, letters) for options lettered from A."""
    letters = [chr(ord("A") + i) for i in range(len(options))]
    return dict(zip(letters, options, strict=True)), letters


def parse_mmmu_choice(response: str, letters: Sequence[str], index2ans: dict[str, str], rng: random.Random) -> str:
    """The letter MMMU reads from ``response``; a random letter (from ``rng``) when none is found."""
    for ch in _EDGE_PUNCT:
        response = response.strip(ch)
    text = f" {response} "
    by_letter, bracketed = True, False
    found = [c for c in letters if f"({c})" in text]
    if found:
        bracketed = True
    if not found:
        found = [c for c in letters if f"{c} " in text]
    if not found:
        found = [c for c in letters if f"{c}." in text]
    if not found and len(text.split()) > 5:
        found = [c for c, ans in index2ans.items() if ans.lower() in text.lower()]
        by_letter = not found
    if not found:
        return rng.choice(list(letters))
    if len(found) == 1:
        return found[0]
    if not by_letter:
        pos = [text.lower().rfind(index2ans[c].lower()) for c in found]
    elif bracketed:
        pos = [text.rfind(f"({c})") for c in found]
    else:
        pos = [text.rfind(f" {c} ") for c in found]
    return found[pos.index(max(pos))]


def _numbers(text: str) -> list[str]:
    commas = re.findall(r"-?\b\d{1,3}(?:,\d{3})+\b", text)
    scientific = re.findall(r"-?\d+(?:\.\d+)?[eE][+-]?\d+", text)
    simple = re.findall(r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])", text)
    return commas + scientific + simple


def _normalize(value: str) -> list[str | float]:
    value = value.strip()
    try:
        return [round(float(value.replace(",", "")), 2)]
    except ValueError:
        pass
    value = value.lower()
    return [" " + value, value + " "] if len(value) == 1 else [value]


_KEY_MARKERS = ["could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result "]


def _key_responses(response: str) -> list[str]:
    response = response.strip().strip(".").lower()
    parts = re.split(r"\.\s(?=[A-Z])|\n", response)
    keys: list[str] = []
    for i, part in enumerate(parts):
        markers = [*_KEY_MARKERS, "="] if i == len(parts) - 1 else _KEY_MARKERS
        shortest = ""
        for m in markers:  # an empty tail is replaced by the next one found, as MMMU's loop does
            if m in part:
                tail = part.split(m)[-1].strip()
                if not shortest or len(tail) < len(shortest):
                    shortest = tail
        if shortest and shortest.strip() not in (":", ",", ".", "!", "?", ";", "'"):
            keys.append(shortest)
    return keys or [response]


def parse_mmmu_open(response: str) -> list[str | float]:
    """The candidate answers MMMU reads from an open-question response (strings and numbers)."""
    keys = _key_responses(response)
    candidates: list[str] = list(keys)
    for k in keys:
        candidates.extend(_numbers(k))
    out: list[str | float] = []
    for c in candidates:
        out.extend(_normalize(c))
    return list(dict.fromkeys(out))


def eval_mmmu_open(gold: str | list[str], preds: Sequence[str | float]) -> bool:
    """MMMU's open-question check: a normalised gold string inside a string candidate, or a number equal."""
    golds: list[str | float] = []
    for g in gold if isinstance(gold, list) else [gold]:
        golds.extend(_normalize(g))
    for p in preds:
        if isinstance(p, str):
            if any(isinstance(g, str) and g in p for g in golds):
                return True
        elif p in golds:
            return True
    return False


_ANSWER_PHRASES = ["the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
                   "best answer is", "the correct option is", "correct option is", "the best option is",
                   "best option is", "the choice is", "choice is", "the correct choice is", "correct choice is",
                   "i choose", "i select", "i pick", "my answer is", "my choice is", "옵션", "정답은", "답은", "답:",
                   "答案是", "答案为", "选", "答えは"]  # fmt: skip
_RANK = {"start": 10, "end": 9, "phrase": 7, "parentheses": 6, "period": 5, "colon": 4, "right_paren": 3, "space": 2,
         "fallback": 0}  # fmt: skip


def extract_mcq_letter(response: str, choices: Sequence[str] = ("A", "B", "C", "D")) -> str:
    """lmms-eval's ranked extraction of a choice letter; "" when there is none.

    Candidates by format (start of text, end, after an answer phrase, "(A)", "A.", "A:", "A)", "A "),
    the highest-ranked format wins, then the later position."""
    if not response or not response.strip():
        return ""
    text = response.strip()
    for ch in [*_EDGE_PUNCT, '"']:
        text = text.strip(ch)
    text = f" {text} "
    cands: list[tuple[str, int, str]] = []
    for fmt, pattern in (("parentheses", "({})"), ("period", "{}."), ("colon", "{}:"), ("right_paren", "{})"),
                         ("space", "{} ")):  # fmt: skip
        cands += [(c, text.rfind(pattern.format(c)), fmt) for c in choices if pattern.format(c) in text]
    lower = text.lower()
    for phrase in _ANSWER_PHRASES:
        idx = lower.find(phrase)
        if idx != -1:
            after = idx + len(phrase)
            cands += [(c, text.find(c, after), "phrase") for c in choices if text.find(c, after) != -1]
    bare = text.strip()
    cands += [(c, 0, "start") for c in choices if bare.startswith(c) and (len(bare) == 1 or not bare[1].isalpha())]
    cands += [(c, len(text) - 1, "end") for c in choices
              if bare.endswith(c) and (len(bare) == 1 or not bare[-2].isalpha())]  # fmt: skip
    if not cands:
        cands = [(c, text.rfind(c), "fallback") for c in choices if c in text]
    if not cands:
        return ""
    return max(cands, key=lambda x: (_RANK[x[2]], x[1]))[0]


_LETTER_DOT = re.compile(r"^\s*([A-Z])\.")


def ai2d_filter(response: str) -> str:
    """AI2D's answer filter: the letter of a response starting "X.", else the response."""
    m = _LETTER_DOT.match(response)
    return m.group(1) if m else response


def scienceqa_correct(response: str, target_letter: str) -> bool:
    """ScienceQA-IMG (LLaVA's rule): the answer is the letter, or starts with the upper-case letter and a period."""
    target = target_letter.strip().lower()
    pred = response.strip()
    if pred.lower() == target:
        return True
    return len(pred) >= 2 and pred[0].isupper() and pred[1] == "." and pred[0].lower() == target
