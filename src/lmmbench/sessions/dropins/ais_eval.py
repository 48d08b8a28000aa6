"""AISBench's scoring of gsm8k predictions (``tasks/openicl_eval.py``, ``datasets/gsm8k.py``,
``openicl/icl_evaluator/icl_base_evaluator.py``, ``utils/postprocess/model_postprocessors.py``), read and
re-written: the predictions sorted by id (a missing one scored as an empty answer), the model's
``extract_non_reasoning_content`` then ``gsm8k_postprocess`` on each prediction, ``gsm8k_dataset_postprocess`` on
each reference, ``Gsm8kEvaluator`` (equal strings, or numbers within 1e-6), ``accuracy`` in percent, and with
``--dump-eval-details`` the per-sample details as AISBench formats them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lmmbench.config.dropins.aisbench_configs import AisDataset, AisModel
from lmmbench.core.errors import UserError
from lmmbench.core.jsonl import jsonl_values
from lmmbench.sessions.dropins.ais_requests import AisItem

__all__ = ["extract_non_reasoning_content", "gsm8k_dataset_postprocess", "gsm8k_postprocess", "is_equal",
           "score_task"]  # fmt: skip

_NUMBER = re.compile(r"\-?\d+\.\d+|\-?\d+")


def gsm8k_dataset_postprocess(text: str) -> str:
    """The reference: the text after ``#### ``, commas removed."""
    return text.split("#### ")[1].replace(",", "")


def gsm8k_postprocess(text: str) -> str:
    """The prediction: the last number before any ``Question:``, else ``NULL``."""
    numbers = _NUMBER.findall(text.split("Question:")[0])
    return numbers[-1] if numbers else "NULL"


def extract_non_reasoning_content(text: Any, start: str = "<think>", end: str = "</think>") -> Any:
    """The text outside reasoning tags (after the last end tag when only end tags appear), stripped."""
    if not isinstance(text, str):
        return text
    if start not in text and end in text:
        return text.split(end)[-1].strip()
    return re.compile(rf"{start}(.*?){end}", re.DOTALL).sub("", text).strip()


def is_equal(pred: str, refer: str) -> bool:
    """``Gsm8kEvaluator.is_equal``."""
    try:
        if pred == refer or abs(float(pred) - int(refer)) < 1e-6:
            return True
    except (ValueError, TypeError):
        pass
    return False


def _predictions(path: Path, total: int) -> list[dict[str, Any]]:
    preds = jsonl_values(path)
    seen = {p.get("id") for p in preds}
    defaults = {list: [], dict: {}, str: "", int: 0, float: 0}
    template = preds[0] if preds else {"prediction": "", "origin_prompt": ""}
    for missing in sorted(set(range(total)) - seen):  # a failed request: scored with an empty answer
        mock = {k: defaults.get(type(v)) for k, v in template.items()}
        mock["id"] = missing
        preds.append(mock)
    preds = [p for p in preds if p.get("id") in range(total)]
    return sorted(preds, key=lambda p: p.get("id", 0))


def score_task(model: AisModel, ds: AisDataset, items: list[AisItem], run_dir: Path, dump_details: bool,
               extract_rate: bool) -> dict[str, Any] | None:  # fmt: skip
    """Score ``ds``'s predictions of ``model`` into ``results/<model>/<ds>.json``; None (nothing written) when
    there are no predictions, as AISBench does."""
    path = run_dir / "predictions" / model.abbr / f"{ds.abbr}.jsonl"
    if not path.is_file():
        return None
    preds = _predictions(path, len(items))
    texts = [p.get("prediction") or "" for p in preds]
    if model.think_tokens is not None:
        texts = [extract_non_reasoning_content(t, *model.think_tokens) for t in texts]
    answers = [gsm8k_postprocess(str(t)) for t in texts]
    refs = []
    for item in items:
        if "#### " not in str(item.gold):
            raise UserError(f"{ds.abbr} row {item.index}: the answer has no '#### ' before the final number "
                            "(gsm8k's format, which gsm8k_dataset_postprocess reads)")
        refs.append(gsm8k_dataset_postprocess(str(item.gold)))
    correct = [is_equal(a, r) for a, r in zip(answers, refs, strict=True)]
    result: dict[str, Any] = {"accuracy": 100 * sum(correct) / len(correct) if correct else 0.0}
    if dump_details:
        rows = zip(preds, answers, refs, correct, strict=True)
        result["details"] = {str(i): {"prompt": p.get("origin_prompt"), "origin_prediction": p.get("prediction"),
                                      "predictions": [a], "references": [r], "correct": [c]}
                             for i, (p, a, r, c) in enumerate(rows)}  # fmt: skip
        result["type"] = "GEN"
        if extract_rate:
            empty = sum(1 for d in result["details"].values() if not d["predictions"])
            result["extract_rate"] = 100 - empty / len(result["details"]) * 100
    out = run_dir / "results" / model.abbr / f"{ds.abbr}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=4), encoding="utf-8")
    return result
