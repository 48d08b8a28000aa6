"""The image benchmarks: MMMU (val), ChartQA, DocVQA (val), TextVQA (val), AI2D, ScienceQA-IMG, MME.

Data sets, splits, prompts (lmms-eval's ``default`` prompt variant), answer checks and aggregations are
those of lmms-eval 0.7.3's task files; each function names the rule it follows.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Sequence
from typing import Any

from lmmbench.evaluation.lmms.media import open_image
from lmmbench.evaluation.lmms.spec import LmmsTask, Scored, mean_of
from lmmbench.metrics.accuracy_mm import (
    MME_PERCEPTION,
    anls_lmms,
    mme_parse,
    mme_scores,
    relaxed_correctness,
    vqa_accuracy,
)
from lmmbench.metrics.accuracy_text import exact_match
from lmmbench.metrics.mc_parse import (
    ai2d_filter,
    eval_mmmu_open,
    mmmu_choice_info,
    parse_mmmu_choice,
    parse_mmmu_open,
    scienceqa_correct,
)

__all__ = ["IMAGE_TASKS"]

Doc = dict[str, Any]
SHORT = "\nAnswer the question using a single word or phrase."
LETTER = "\nAnswer with the option's letter from the given choices directly."


def _one_image(doc: Doc) -> list[Any]:
    return [open_image(doc["image"])]


def _lettered(choices: Sequence[str]) -> str:
    return "\n".join(f"{chr(ord('A') + i)}. {c}" for i, c in enumerate(choices))


# ---------------------------------------------------------------- MMMU
MMMU_DOMAINS = {
    "Art and Design": ["Art", "Art_Theory", "Design", "Music"],
    "Business": ["Accounting", "Economics", "Finance", "Manage", "Marketing"],
    "Science": ["Biology", "Chemistry", "Geography", "Math", "Physics"],
    "Health and Medicine": ["Basic_Medical_Science", "Clinical_Medicine", "Diagnostics_and_Laboratory_Medicine",
                            "Pharmacy", "Public_Health"],
    "Humanities and Social Science": ["History", "Literature", "Sociology", "Psychology"],
    "Tech and Engineering": ["Agriculture", "Architecture_and_Engineering", "Computer_Science", "Electronics",
                             "Energy_and_Power", "Materials", "Mechanical_Engineering"],
}  # fmt: skip
_SUBJECT_DOMAIN = {s: d for d, subs in MMMU_DOMAINS.items() for s in subs}


def _mmmu_full_prompt(doc: Doc) -> str:
    """MMMU's question, lettered options and instruction (``construct_prompt`` with the default prompts)."""
    if doc["question_type"] == "multiple-choice":
        opts = _lettered(ast.literal_eval(doc["options"]))
        return f"{doc['question']}\n{opts}\n\nAnswer with the option's letter from the given choices directly."
    return f"{doc['question']}\n\nAnswer the question using a single word or phrase."


def mmmu_prompt(doc: Doc) -> str:
    """The text lmms-eval sends: ``<image k>`` markers cut out, the pieces stripped (joined by newlines)."""
    text = re.sub(r"<image [1-7]>", "<image>", _mmmu_full_prompt(doc))
    return "\n".join(p.strip() for p in text.split("<image>") if p.strip())


def mmmu_layout(doc: Doc) -> list[str | int]:
    """lmms-eval's interleaved MMMU turn: each image after the (stripped, non-empty) text before its marker,
    then the text after the last marker (always)."""
    pieces = re.sub(r"<image [1-7]>", "<image>", _mmmu_full_prompt(doc)).split("<image>")
    out: list[str | int] = []
    for i in range(len(mmmu_images_refs(doc))):
        if i < len(pieces) - 1 and pieces[i].strip():
            out.append(pieces[i].strip())
        out.append(i)
    out.append(pieces[-1].strip())
    return out


def mmmu_images_refs(doc: Doc) -> list[str]:
    """The image columns the question and options refer to (``<image k>`` -> ``image_k``), in order of k."""
    return sorted({m.strip("<>").replace(" ", "_") for m in re.findall(r"<image \d+>", _mmmu_full_prompt(doc))})


def mmmu_images(doc: Doc) -> list[Any]:
    """The images the question and options refer to (``<image k>``), in order of k."""
    return [open_image(doc[r]) for r in mmmu_images_refs(doc)]


def mmmu_subject(doc_id: str) -> str:
    """``validation_Art_Theory_12`` -> ``Art_Theory``."""
    split = doc_id.split("_")[0]
    m = re.match(rf"^{split}_(.+?)_\d+$", doc_id)
    if not m:
        raise ValueError(f"MMMU id {doc_id!r} does not look like <split>_<subject>_<n>")
    return m.group(1)


def mmmu_score(doc: Doc, answer: str) -> Scored:
    """MMMU: the multiple-choice letter or the open candidates, checked as the MMMU authors' code does."""
    if doc["question_type"] == "multiple-choice":
        index2ans, letters = mmmu_choice_info(ast.literal_eval(doc["options"]))
        rng = random.Random(str(doc["id"]))  # a letter drawn only when none is found (per sample, reproducible)
        parsed: Any = parse_mmmu_choice(answer, letters, index2ans, rng)
        gold = doc["answer"]
        ok = parsed in gold if isinstance(gold, list) else parsed == gold
    else:
        parsed = parse_mmmu_open(answer)
        ok = eval_mmmu_open(doc["answer"], parsed)
    return {"mmmu_acc": 1.0 if ok else 0.0, "parsed": parsed}


def mmmu_aggregate(samples: Sequence[Scored]) -> dict[str, float]:
    """Instance-level accuracy, rounded to 5 decimals as lmms-eval reports it."""
    vals = [float(s["mmmu_acc"]) for s in samples]
    return {"mmmu_acc": round(sum(vals) / len(vals), 5)} if vals else {}


def _mmmu_meta(doc: Doc) -> dict[str, Any]:
    subject = mmmu_subject(str(doc["id"]))
    return {"subject": subject, "domain": _SUBJECT_DOMAIN.get(subject, "?"), "question_type": doc["question_type"]}


# ---------------------------------------------------------------- ChartQA, DocVQA, TextVQA
def chartqa_score(doc: Doc, answer: str) -> Scored:
    """ChartQA relaxed accuracy, overall and per split (human / augmented)."""
    score = 1.0 if relaxed_correctness(answer, doc["answer"]) else 0.0
    split = "relaxed_human_split" if doc["type"] == "human_test" else "relaxed_augmented_split"
    return {"relaxed_overall": score, split: score, "parsed": answer}


def _chartqa_aggregate(samples: Sequence[Scored]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in ("relaxed_overall", "relaxed_human_split", "relaxed_augmented_split"):
        out.update(mean_of(name)(samples))
    return out


def docvqa_score(doc: Doc, answer: str) -> Scored:
    """DocVQA ANLS over the reference answers."""
    return {"anls": anls_lmms(answer, list(doc["answers"])), "parsed": answer}


def textvqa_prompt(doc: Doc) -> str:
    """TextVQA: the question with ``str.capitalize`` (the rest lower-cased), then the short-answer instruction."""
    return f"{doc['question'].capitalize()}{SHORT}"


def textvqa_score(doc: Doc, answer: str) -> Scored:
    """TextVQA's VQA accuracy (reported by lmms-eval as ``exact_match``)."""
    return {"exact_match": vqa_accuracy(answer, list(doc.get("answers") or [])), "parsed": answer}


# ---------------------------------------------------------------- AI2D, ScienceQA-IMG
def ai2d_prompt(doc: Doc) -> str:
    return f"{doc['question']}\n{_lettered(doc['options'])}{LETTER}"


def ai2d_score(doc: Doc, answer: str) -> Scored:
    """AI2D: the letter of "X." (flexible-extract filter), exact match ignoring case and punctuation."""
    target = chr(ord("A") + int(doc["answer"]))
    parsed = ai2d_filter(answer).strip()
    return {"exact_match": exact_match(parsed, target, ignore_case=True, ignore_punctuation=True), "parsed": parsed}


def scienceqa_prompt(doc: Doc) -> str:
    context = f"Context: {doc['hint']}\n" if doc.get("hint") else ""
    return f"{context}{doc['question']}\n{_lettered(doc['choices'])}{LETTER}"


def scienceqa_images(doc: Doc) -> list[Any]:
    return [] if doc.get("image") is None else [open_image(doc["image"])]


def scienceqa_score(doc: Doc, answer: str) -> Scored:
    target = chr(ord("A") + int(doc["answer"]))
    return {"exact_match": 1.0 if scienceqa_correct(answer, target) else 0.0, "parsed": answer}


# ---------------------------------------------------------------- MME
def mme_prompt(doc: Doc) -> str:
    """MME: the question without " Please answer yes or no.", then the short-answer instruction."""
    return str(doc["question"]).strip().replace(" Please answer yes or no.", "") + SHORT


def mme_score(doc: Doc, answer: str) -> Scored:
    parsed = mme_parse(answer)
    gold = str(doc["answer"]).lower().strip().replace(".", "")
    return {"score": 1.0 if parsed == gold else 0.0, "parsed": parsed,
            "question_id": doc["question_id"], "category": doc["category"]}  # fmt: skip


def mme_aggregate(samples: Sequence[Scored]) -> dict[str, float]:
    return mme_scores(samples)[0]


def _mme_metric_of(sample: Scored) -> str:
    """MME's perception score is over its perception categories, the cognition score over the rest."""
    return "mme_perception_score" if sample["category"] in MME_PERCEPTION else "mme_cognition_score"


IMAGE_TASKS = [
    LmmsTask("mmmu_val", "lmms-lab-encoder/MMMU", None, "validation", "image", 128, mmmu_prompt, mmmu_images,
             mmmu_score, mmmu_aggregate, ("mmmu_acc",), ("mmmu_acc",), ("subject", "domain"), meta=_mmmu_meta,
             layout=mmmu_layout),
    LmmsTask("chartqa", "lmms-lab-encoder/ChartQA", None, "test", "image", 16,
             lambda d: f"{d['question']}\nAnswer the question with a single word.", _one_image, chartqa_score,
             _chartqa_aggregate, ("relaxed_overall", "relaxed_human_split", "relaxed_augmented_split"),
             ("relaxed_overall", "relaxed_human_split", "relaxed_augmented_split"), ("type",),
             meta=lambda d: {"type": d["type"]}),
    LmmsTask("docvqa_val", "lmms-lab-encoder/DocVQA", "DocVQA", "validation", "image", 32,
             lambda d: f"{d['question']}{SHORT}", _one_image, docvqa_score, mean_of("anls"), ("anls",), ("anls",)),
    LmmsTask("textvqa_val", "lmms-lab-encoder/textvqa", None, "validation", "image", 1024, textvqa_prompt,
             _one_image, textvqa_score, mean_of("exact_match"), ("exact_match",), ("exact_match",)),
    LmmsTask("ai2d", "lmms-lab-encoder/ai2d", None, "test", "image", 16, ai2d_prompt, _one_image, ai2d_score,
             mean_of("exact_match"), ("exact_match",), ("exact_match",)),
    LmmsTask("scienceqa_img", "lmms-lab-encoder/ScienceQA", "ScienceQA-IMG", "test", "image", 16, scienceqa_prompt,
             scienceqa_images, scienceqa_score, mean_of("exact_match"), ("exact_match",), ("exact_match",),
             ("subject",), meta=lambda d: {"subject": d.get("subject")}),
    LmmsTask("mme", "lmms-lab-encoder/MME", None, "test", "image", 16, mme_prompt, _one_image, mme_score,
             mme_aggregate, ("mme_perception_score", "mme_cognition_score"), (), ("category",),
             meta=lambda d: {"category": d["category"]}, metric_of=_mme_metric_of),
]  # fmt: skip
