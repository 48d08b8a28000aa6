"""Answer checks and scores of the standard multimodal benchmarks, as lmms-eval 0.7.3 defines them.

Each function states the rule it implements; the rules (and their quirks) are lmms-eval's, which took
them from the benchmarks' own evaluation scripts (DocVQA / InfographicVQA ANLS, ChartQA relaxed accuracy,
the VQA challenge's answer normalisation, MME's acc + acc+, Whisper's text normaliser for WER). The
values were checked against lmms-eval's own functions (benchmarks/lmms_eval_crosscheck.py).
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lmmbench.core.errors import UserError
from lmmbench.metrics.accuracy_text import levenshtein as _levenshtein

__all__ = [
    "anls_lmms",
    "corpus_wer",
    "mme_parse",
    "mme_scores",
    "relaxed_correctness",
    "remove_special_and_punct_space",
    "spelling_mapping_file",
    "vqa_accuracy",
    "vqa_normalize",
]


def anls_lmms(prediction: str, references: Sequence[str], threshold: float = 0.5) -> float:
    """ANLS of one answer: 1 − the smallest normalised edit distance to a reference, 0 below ``threshold``.

    The distance is taken between the lower-cased, whitespace-collapsed strings; it is divided by the
    longer of the two *raw* strings (upper-cased length), as lmms-eval's ``anls`` does."""
    det = " ".join(prediction.strip().lower().split())
    values = []
    for ref in references:
        gt = " ".join(ref.strip().lower().split())
        length = max(len(ref.upper()), len(prediction.upper()))
        values.append(0.0 if length == 0 else _levenshtein(gt, det) / length)
    if not values:
        raise ValueError("no reference answers")  # not a score of 0: the sample cannot be scored
    result = 1.0 - min(values)
    return 0.0 if result < threshold else result


def _to_float(text: str) -> float | None:
    try:
        return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_correctness(prediction: str, target: str, max_relative_change: float = 0.05) -> bool:
    """ChartQA: numbers within 5 % of a non-zero target (``x%`` read as x / 100), else case-insensitive equality."""
    pred_f, target_f = _to_float(prediction), _to_float(target)
    if pred_f is not None and target_f:
        return abs(pred_f - target_f) / abs(target_f) <= max_relative_change
    return prediction.lower() == target.lower()


# the VQA challenge's answer normalisation (EvalAI): contractions restored, number words to digits,
# articles dropped, punctuation removed or spaced
_CONTRACTIONS_TABLE = """
aint:ain't arent:aren't cant:can't couldve:could've couldnt:couldn't couldn'tve:couldn't've couldnt've:couldn't've
didnt:didn't doesnt:doesn't dont:don't hadnt:hadn't hadnt've:hadn't've hadn'tve:hadn't've hasnt:hasn't
havent:haven't hed:he'd hed've:he'd've he'dve:he'd've hes:he's howd:how'd howll:how'll hows:how's Id've:I'd've
I'dve:I'd've Im:I'm Ive:I've isnt:isn't itd:it'd itd've:it'd've it'dve:it'd've itll:it'll let's:let's maam:ma'am
mightnt:mightn't mightnt've:mightn't've mightn'tve:mightn't've mightve:might've mustnt:mustn't mustve:must've
neednt:needn't notve:not've oclock:o'clock oughtnt:oughtn't ow's'at:'ow's'at 'ows'at:'ow's'at 'ow'sat:'ow's'at
shant:shan't shed've:she'd've she'dve:she'd've she's:she's shouldve:should've shouldnt:shouldn't
shouldnt've:shouldn't've shouldn'tve:shouldn't've somebody'd:somebodyd somebodyd've:somebody'd've
somebody'dve:somebody'd've somebodyll:somebody'll somebodys:somebody's someoned:someone'd someoned've:someone'd've
someone'dve:someone'd've someonell:someone'll someones:someone's somethingd:something'd
somethingd've:something'd've something'dve:something'd've somethingll:something'll thats:that's thered:there'd
thered've:there'd've there'dve:there'd've therere:there're theres:there's theyd:they'd theyd've:they'd've
they'dve:they'd've theyll:they'll theyre:they're theyve:they've twas:'twas wasnt:wasn't wed've:we'd've
we'dve:we'd've weve:we've werent:weren't whatll:what'll whatre:what're whats:what's whatve:what've whens:when's
whered:where'd wheres:where's whereve:where've whod:who'd whod've:who'd've who'dve:who'd've wholl:who'll
whos:who's whove:who've whyll:why'll whyre:why're whys:why's wont:won't wouldve:would've wouldnt:wouldn't
wouldnt've:wouldn't've wouldn'tve:wouldn't've yall:y'all yall'll:y'all'll y'allll:y'all'll yall'd've:y'all'd've
y'alld've:y'all'd've y'all'dve:y'all'd've youd:you'd youd've:you'd've you'dve:you'd've youll:you'll
youre:you're youve:you've
"""
_CONTRACTIONS = dict(pair.split(":", 1) for pair in _CONTRACTIONS_TABLE.split())
_NUMBERS = {w: str(i) for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}
_NUMBERS["none"] = "0"
_ARTICLES = {"a", "an", "the"}
_PUNCT = [";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!"]
_DIGIT_COMMA = re.compile(r"(?<=\d)(,)+(?=\d)")
# a period not followed by a digit (the original pattern's look-behind is written as a look-ahead for
# the literal text "<=digit", so it practically never blocks); at most 32 removals (re.UNICODE passed as count)
_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")


def _vqa_punctuation(text: str) -> str:
    out = text
    digit_comma = _DIGIT_COMMA.search(text) is not None
    for p in _PUNCT:
        if p + " " in text or " " + p in text or digit_comma:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _PERIOD.sub("", out, count=int(re.UNICODE))


def vqa_normalize(answer: str) -> str:
    """An answer as the VQA challenge compares it (EvalAI's processor, used by lmms-eval's TextVQA)."""
    text = answer.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    text = _vqa_punctuation(text)
    words = [_NUMBERS.get(w, w) for w in text.lower().split()]
    words = [w for w in words if w not in _ARTICLES]
    return " ".join(_CONTRACTIONS.get(w, w) for w in words)


def vqa_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """VQA accuracy: mean over the ten leave-one-out subsets of min(1, matches / 3)."""
    if not answers:
        raise ValueError("no reference answers")  # not a score of 0: the sample cannot be scored
    pred = vqa_normalize(prediction)
    gts = [vqa_normalize(a) for a in answers]
    accs = []
    for i in range(len(gts)):
        matches = sum(1 for j, g in enumerate(gts) if j != i and g == pred)
        accs.append(min(1.0, matches / 3))
    return sum(accs) / len(accs)


def mme_parse(prediction: str) -> str:
    """MME's yes / no / other reading of an answer (from the Otter evaluation)."""
    ans = prediction.lower().strip().replace(".", "")
    if ans in ("yes", "no"):
        return ans
    if len(ans) == 1:
        return {"y": "yes", "n": "no"}.get(ans, "other")
    head = ans[:4]
    return "yes" if "yes" in head else "no" if "no" in head else "other"


MME_PERCEPTION = ("existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark",
                  "artwork", "OCR")  # fmt: skip
MME_COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")


def mme_scores(samples: Sequence[Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """MME scores from per-sample ``{"question_id", "category", "score"}``.

    A category's score is, averaged over its images (``question_id``, two questions each), acc + acc+
    (acc: percent of the two answered right; acc+: 100 when both are). Returns ({"mme_perception_score",
    "mme_cognition_score"} summed over the categories present, {category: score})."""
    per_cat: dict[str, dict[str, list[float]]] = {}
    for s in samples:
        per_cat.setdefault(str(s["category"]), {}).setdefault(str(s["question_id"]), []).append(float(s["score"]))
    cats: dict[str, float] = {}
    for cat, questions in per_cat.items():
        total = 0.0
        for qid, scores in questions.items():
            if len(scores) != 2:
                raise ValueError(f"MME scores image pairs: {qid} has {len(scores)} question(s), not 2")
            total += sum(scores) / 2 * 100.0 + (100.0 if sum(scores) == 2 else 0.0)
        cats[cat] = total / len(questions)
    out: dict[str, float] = {}
    perception = [v for c, v in cats.items() if c in MME_PERCEPTION]
    cognition = [v for c, v in cats.items() if c not in MME_PERCEPTION]
    if perception:
        out["mme_perception_score"] = sum(perception)
    if cognition:
        out["mme_cognition_score"] = sum(cognition)
    return out, cats


def remove_special_and_punct_space(text: str, puncs: str = "!,.?;:") -> str:
    """lmms-eval's ``remove_sp``: ``<|...|>`` tokens to spaces, whitespace runs collapsed, no space before
    punctuation, leading spaces dropped."""
    text = re.sub(r"<\|.*?\|>", " ", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(f" ?([{re.escape(puncs)}])", r"\1", text)
    return text.lstrip(" ")


def spelling_mapping_file() -> Path | None:
    """Whisper's British-to-American spelling table, where one is installed: ``$LMMBENCH_WHISPER_SPELLING``,
    then the ``whisper`` or ``lmms_eval`` package's copy. None when there is none."""
    env = os.environ.get("LMMBENCH_WHISPER_SPELLING")
    if env:
        return Path(env)
    import importlib.util

    for pkg, rel in (("whisper", "normalizers/english.json"),
                     ("lmms_eval", "tasks/librispeech/whisper_normalizer/english.json")):  # fmt: skip
        spec = importlib.util.find_spec(pkg)
        if spec is not None and spec.origin is not None and (Path(spec.origin).parent / rel).is_file():
            return Path(spec.origin).parent / rel
    return None


def _whisper_normalizers() -> tuple[Callable[[str], str], Callable[[str], str]]:
    from transformers.models.whisper.english_normalizer import BasicTextNormalizer, EnglishTextNormalizer

    path = spelling_mapping_file()
    mapping: Any = {}
    if path is not None:
        from lmmbench.config.input_files import load_json, read_text

        mapping = load_json(read_text(path, "spelling table ($LMMBENCH_WHISPER_SPELLING)"), path)
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise UserError(f"{path}: not a spelling table (a JSON object of British -> American words)")
    return EnglishTextNormalizer(mapping), BasicTextNormalizer()


def _drop_punct_tokens(text: str) -> str:
    return " ".join(t for t in text.split(" ") if not all(unicodedata.category(c)[0] == "P" for c in t))


def corpus_wer(references: Sequence[str], hypotheses: Sequence[str], language: str = "en") -> float:
    """Corpus word error rate in percent, as lmms-eval scores LibriSpeech.

    Each text: ``remove_special_and_punct_space``, then Whisper's English normaliser (English only) and
    its basic normaliser, lower case, tokens made only of punctuation dropped; WER = total word edit
    distance / total reference words × 100. Whisper's British-to-American spelling table is applied when
    ``spelling_mapping_file()`` finds one (transformers ships the normaliser without it)."""
    english, basic = _whisper_normalizers()
    distance = length = 0
    for ref, hyp in zip(references, hypotheses, strict=True):
        items = []
        for text in (ref, hyp):
            text = remove_special_and_punct_space(text)
            if language == "en":
                text = english(text)
            text = basic(text)
            items.append(_drop_punct_tokens(text).lower().split())
        distance += _levenshtein(items[0], items[1])
        length += len(items[0])
    if length == 0:
        raise ValueError("word error rate of empty references")
    return distance / length * 100.0
