"""Synthetic rows in the real schemas of popular lm-eval data sets (ARC, HellaSwag, MMLU), for the `datasets` cache.

Used by ``benchmarks/lmeval_speed.py`` with :func:`lmmbench.testing.hf_datasets.write_dataset_cache`: the rows
have the fields and types of ``allenai/ai2_arc`` (ARC-Easy), ``Rowan/hellaswag`` and ``cais/mmlu`` (one config
per subject), with sentences of varied length so that prompts are not all one size.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["arc_hellaswag_mmlu_rows", "mmlu_subjects"]

_WORDS = ("the river carries water to a large lake near the old town where people build boats and study the "
          "stars at night while students learn how energy moves through plants animals and rocks").split()


def _sentence(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi))).capitalize()


def mmlu_subjects(tag: str = "mmlu_stem_tasks") -> list[str]:
    """The MMLU subjects (``dataset_name``s) that lm-eval's default MMLU tasks tag with ``tag``."""
    from pathlib import Path

    import lm_eval
    import yaml

    folder = Path(lm_eval.__file__).parent / "tasks" / "mmlu" / "default"
    out = []
    for f in sorted(folder.glob("mmlu_*.yaml")):
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("tag") == tag:
            out.append(str(data["dataset_name"]))
    return out


def arc_hellaswag_mmlu_rows(n: int, seed: int = 0) -> dict[tuple[str, str | None], dict[str, list[dict[str, Any]]]]:
    """(repo, config) -> split -> rows, ``n`` rows in each evaluated split, every split the real data set has."""
    rng = random.Random(seed)
    arc = [{"id": f"q{i}", "question": _sentence(rng, 8, 30) + "?",
            "choices": {"text": [_sentence(rng, 1, 6) for _ in range(4)], "label": ["A", "B", "C", "D"]},
            "answerKey": "ABCD"[i % 4]} for i in range(n + 6)]  # fmt: skip
    hella = [{"ind": i, "activity_label": "Cooking", "ctx_a": _sentence(rng, 10, 30) + ".", "ctx_b": "then he",
              "ctx": "", "endings": [_sentence(rng, 6, 20) + "." for _ in range(4)], "source_id": "x",
              "split": "val", "split_type": "indomain", "label": str(i % 4)} for i in range(n + 6)]  # fmt: skip
    for h in hella:
        h["ctx"] = f"{h['ctx_a']} {h['ctx_b']}"
    out: dict[tuple[str, str | None], dict[str, list[dict[str, Any]]]] = {
        ("allenai/ai2_arc", "ARC-Easy"): {"train": arc[:3], "validation": arc[3:6], "test": arc[6:]},
        ("Rowan/hellaswag", None): {"train": hella[:6], "validation": hella[6:]},
    }
    for subject in mmlu_subjects():
        rows = [{"question": _sentence(rng, 10, 40) + "?", "subject": subject,
                 "choices": [_sentence(rng, 1, 5) for _ in range(4)], "answer": i % 4}
                for i in range(n + 5)]  # fmt: skip
        out[("cais/mmlu", subject)] = {"test": rows[5:], "validation": rows[:5], "dev": rows[:5]}
    return out
