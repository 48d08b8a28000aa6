"""The audio and video benchmarks: LibriSpeech test-clean (WER) and Video-MME (multiple choice).

As lmms-eval 0.7.3 defines them (default prompt variant). Video-MME's videos are read where lmms-eval
unpacks them, ``$HF_HOME/videomme/data/<videoID>.mp4`` (or ``.MP4`` / ``.mkv``), and sent as
``VIDEO_FRAMES`` uniformly sampled frames (lmms-eval's OpenAI-compatible model's ``max_frames_num``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmmbench.evaluation.lmms.media import hf_home
from lmmbench.evaluation.lmms.spec import LmmsTask, Scored
from lmmbench.metrics.accuracy_mm import corpus_wer, spelling_mapping_file
from lmmbench.metrics.mc_parse import extract_mcq_letter

__all__ = ["AV_TASKS", "VIDEO_FRAMES", "videomme_video"]

Doc = dict[str, Any]
VIDEO_FRAMES = 10
log = logging.getLogger(__name__)


def librispeech_score(doc: Doc, answer: str) -> Scored:
    """The pair kept for the corpus WER (and the language, from the ``task`` field ``asr_<lang>``)."""
    return {"gt": doc["gt"], "pred": answer, "language": str(doc.get("task", "asr_en"))[4:], "parsed": answer}


def librispeech_aggregate(samples: Sequence[Scored]) -> dict[str, float]:
    """Corpus WER in percent (the language of the last sample, as lmms-eval takes it)."""
    if not samples:
        return {}
    lang = str(samples[-1]["language"])
    if lang == "en" and spelling_mapping_file() is None:
        log.warning("WER without Whisper's British-to-American spelling table (set LMMBENCH_WHISPER_SPELLING to "
                    "its english.json for lmms-eval's exact numbers)")
    return {"wer": corpus_wer([s["gt"] for s in samples], [s["pred"] for s in samples], lang)}


def videomme_video(doc: Doc) -> Path:
    """The video file of a Video-MME row."""
    base = hf_home() / "videomme" / "data" / f"{doc['videoID']}"
    for suffix in (".mp4", ".MP4", ".mkv"):
        if base.with_suffix(suffix).is_file():
            return base.with_suffix(suffix)
    raise ValueError(f"video {base}.mp4 does not exist (Video-MME's videos belong in $HF_HOME/videomme/data)")


def videomme_prompt(doc: Doc) -> str:
    options = "\n".join(str(o) for o in doc["options"])
    return ("Select the best answer to the following multiple-choice question based on the video and the subtitles. "
            "Respond with only the letter (A, B, C, or D) of the correct option.\n"
            f"{doc['question']}\n{options}\n\nAnswer with the option's letter from the given choices directly.")


def videomme_score(doc: Doc, answer: str) -> Scored:
    """The letter from lmms-eval's ranked extraction; right when it equals the answer letter."""
    parsed = extract_mcq_letter(answer, ["A", "B", "C", "D"])
    return {"correct": 1.0 if parsed == doc["answer"] else 0.0, "parsed": parsed}


def videomme_aggregate(samples: Sequence[Scored]) -> dict[str, float]:
    """Percent of questions answered right."""
    if not samples:
        return {}
    return {"videomme_perception_score": 100.0 * sum(float(s["correct"]) for s in samples) / len(samples)}


AV_TASKS = [
    LmmsTask("librispeech_test_clean", "lmms-lab-audio/librispeech", "librispeech_test_clean",
             "librispeech_test_clean", "audio", 256,
             lambda d: "Please recognize the speech and only output the recognized content:",
             lambda d: [d["audio"]], librispeech_score, librispeech_aggregate, ("wer",), (), ("source",),
             lower_is_better=("wer",), meta=lambda d: {"source": d.get("source")},
             notes=lambda: {"whisper_spelling_table": str(spelling_mapping_file() or "none (not found)")}),
    LmmsTask("videomme", "lmms-eval/Video-MME", None, "test", "video", 16, videomme_prompt,
             lambda d: [videomme_video(d)], videomme_score, videomme_aggregate, ("videomme_perception_score",), (),
             ("duration", "domain", "task_type"),
             meta=lambda d: {k: d.get(k) for k in ("duration", "domain", "task_type")},
             notes=lambda: {"frames_per_video": VIDEO_FRAMES, "frame_sampling": "linspace(0, n-1, frames, int)"}),
]  # fmt: skip
