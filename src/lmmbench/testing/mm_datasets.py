"""Small synthetic copies of lmms-eval's nine standard benchmarks, in each hub data set's own schema.

``write_all(hf_home)`` writes them into the ``datasets`` Arrow cache under ``hf_home`` (as
``load_dataset`` finds them offline; FIELD-NOTES "Hugging Face caches offline"): images drawn with PIL
(stored as PNG), speech-like clips synthesised with NumPy (stored as WAV bytes), Video-MME's videos
written with PyAV to ``$HF_HOME/videomme/data/<videoID>.mp4`` where lmms-eval unpacks them.

Every row also has a scripted answer (``SCRIPTED``): what a test server answers for it. They mix the
gold answer in the forms people write it ("B", "The answer is (C).", "43" for 42 in ChartQA) with wrong
ones, so that each benchmark's parser and metric are exercised; the expected scores come from
lmms-eval's own functions (benchmarks/lmms_eval_crosscheck.py), never from lmmbench.
"""

from __future__ import annotations

import hashlib
import io
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["SCRIPTED", "TASK_ROWS", "audio_bytes", "png_of", "rules", "rules_by_task", "write_all"]

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}


def png_of(colour: str, count: int = 1, size: int = 56, text: str = "") -> bytes:
    """A PNG (RGB) with ``count`` squares of ``colour`` on white, and optional text."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for i in range(count):
        x = 4 + (i % 3) * 17
        y = 4 + (i // 3) * 17
        draw.rectangle([x, y, x + 12, y + 12], fill=COLOURS[colour])
    if text:
        draw.text((2, size - 12), text, fill=(0, 0, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def audio_bytes(seed: int, seconds: float = 0.6, rate: int = 16000) -> bytes:
    """A WAV clip: a few tones with a syllable-like envelope (16 kHz mono, 16-bit)."""
    import numpy as np
    import soundfile as sf

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    wave = sum(np.sin(2 * np.pi * f * t) for f in rng.uniform(120, 900, 3)) / 3
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    buf = io.BytesIO()
    sf.write(buf, (0.3 * wave * envelope).astype("float32"), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _img(colour: str, count: int = 1, text: str = "") -> dict[str, Any]:
    return {"bytes": png_of(colour, count, text=text), "path": None}


def _mmmu(i: int, subject: str, question: str, options: list[str], answer: str, qtype: str = "multiple-choice",
          second: bool = False) -> dict[str, Any]:  # fmt: skip
    row: dict[str, Any] = {"id": f"validation_{subject}_{i}", "question": question, "options": repr(options),
                           "explanation": "", "img_type": "['Diagrams']", "answer": answer,
                           "topic_difficulty": "Easy", "question_type": qtype, "subfield": subject}  # fmt: skip
    for k in range(1, 8):
        row[f"image_{k}"] = None
    row["image_1"] = _img(["red", "green", "blue", "yellow"][i % 4], 1 + i % 3)
    if second:
        row["image_2"] = _img("yellow", 2)
    return row


def _av_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of the audio (LibriSpeech) and video (Video-MME) benchmarks."""
    libri = [{"audio": {"bytes": audio_bytes(i), "path": f"{1089 + i}-134686-{i:04d}.wav"}, "gt": gt,
              "source": "librispeech_test_clean", "task": "asr_en"} for i, gt in enumerate([
        "HE HOPED THERE WOULD BE STEW FOR DINNER",
        "MISTER SMITH PAID TWENTY DOLLARS FOR THE BOOK",
        "THE COLOR OF THE SKY WAS GRAY",
        "STUFF IT INTO YOU HIS BELLY ADVISED HIM",
    ])]  # fmt: skip
    videomme = [{"video_id": f"{n:03d}", "duration": d, "domain": dom, "sub_category": "Humanity & History",
                 "url": f"https://example.invalid/{vid}", "videoID": vid, "question_id": f"{n:03d}-{k}",
                 "task_type": tt, "question": q, "options": ["A. red", "B. green", "C. blue", "D. yellow"],
                 "answer": a} for n, k, vid, d, dom, tt, q, a in [
        (1, 1, "vidAAA001", "short", "Knowledge", "Object Recognition", "Q1: What colour is the square?", "A"),
        (1, 2, "vidAAA001", "short", "Knowledge", "Counting Problem", "Q2: Which colour appears last?", "B"),
        (2, 1, "vidBBB002", "medium", "Sports Competition", "Action Reasoning", "Q3: Which colour moves?", "C"),
        (2, 2, "vidBBB002", "medium", "Sports Competition", "Object Recognition", "Q4: Which colour is absent?",
         "D"),
    ]]  # fmt: skip
    return libri, videomme


def _rows() -> dict[str, list[dict[str, Any]]]:
    c4 = ["red", "green", "blue", "yellow"]
    mmmu = [
        _mmmu(1, "Art_Theory", "<image 1> Q1: Which colour fills the square?", c4, "A"),
        _mmmu(2, "Art_Theory", "Q2: Look at <image 1>. Which colour is shown?", c4, "B"),
        _mmmu(3, "Math", "<image 1> Q3: How many squares are drawn?", [], "3", "open"),
        _mmmu(4, "Math", "<image 1> Q4: What is the area ratio?", [], "0.5", "open"),
        _mmmu(5, "Physics", "<image 1> Q5: Which option matches the figure?", ["<image 2>", "a circle", "a line"],
              "A", second=True),
        _mmmu(6, "History", "<image 1> Q6: Which colour is the flag?", c4, "C"),
        _mmmu(7, "Computer_Science", "<image 1> Q7: Which colour is the node?", c4, "D"),
        _mmmu(8, "Computer_Science", "<image 1> Q8: How many nodes?", [], "2", "open"),
    ]
    chartqa = [{"type": t, "question": q, "answer": a, "image": _img(c, n, a)} for t, q, a, c, n in [
        ("human_test", "Q1: What is the value of the first bar?", "42", "red", 2),
        ("human_test", "Q2: Is the trend rising?", "Yes", "green", 1),
        ("human_test", "Q3: What is the peak value?", "100", "blue", 3),
        ("augmented_test", "Q4: Which year had the most sales?", "2019", "yellow", 2),
        ("augmented_test", "Q5: What is the average?", "7.5", "red", 1),
        ("augmented_test", "Q6: What share is blue?", "12%", "blue", 2),
    ]]  # fmt: skip
    docvqa = [{"questionId": str(50 + i), "question": q, "question_types": ["form"], "image": _img(c, 1, a[0][:6]),
               "docId": 100 + i, "ucsf_document_id": f"doc{i}", "ucsf_document_page_no": "1", "answers": a,
               "data_split": "val"} for i, (q, a, c) in enumerate([
        ("Q1: What is the name on the form?", ["John Smith", "J. Smith"], "red"),
        ("Q2: What is the date?", ["12 May 1998"], "green"),
        ("Q3: Who signed the letter?", ["Dr. Alice Brown"], "blue"),
        ("Q4: What is the total?", ["$1,250"], "yellow"),
        ("Q5: What is the company?", ["ACME Corp"], "red"),
    ])]  # fmt: skip
    textvqa = [{"image_id": f"img{i}", "question_id": 3000 + i, "question": q, "question_tokens": q.split(),
                "image": _img(c, 2), "image_width": 56, "image_height": 56, "flickr_original_url": "",
                "flickr_300k_url": "", "answers": a, "image_classes": ["Poster"], "set_name": "val",
                "ocr_tokens": ["sign"]} for i, (q, a, c) in enumerate([
        ("q1: what brand is on the can?", ["coca cola"] * 2 + ["coke"] * 8, "red"),
        ("Q2: What number is on the shirt?", ["ten"] * 2 + ["10"] * 6 + ["1o", "ten."], "green"),
        ("Q3: What does the sign say?", ["stop"] * 10, "blue"),
        ("Q4: what is written on the door?", ["exit"] + ["push"] * 9, "yellow"),
    ])]  # fmt: skip
    ai2d = [{"question": q, "options": o, "answer": a, "image": _img(c, 2)} for q, o, a, c in [
        ("Q1: Which stage comes after the egg?", ["adult", "larva", "pupa", "egg"], "1", "red"),
        ("Q2: What eats the grass?", ["rabbit", "fox", "hawk", "sun"], "0", "green"),
        ("Q3: Which layer is the crust?", ["A", "B", "C", "D"], "2", "blue"),
        ("Q4: Which planet is largest?", ["Mars", "Earth", "Jupiter", "Venus"], "2", "yellow"),
    ]]  # fmt: skip
    sqa = [{"image": _img(c, 1), "question": q, "choices": ch, "answer": a, "hint": h, "task": "closed choice",
            "grade": "grade4", "subject": s, "topic": "geography", "category": "Geography", "skill": "read maps",
            "lecture": "", "solution": ""} for q, ch, a, h, c, s in [
        ("Q1: Which colour is the square?", ["red", "green"], 0, "Look at the picture.", "red", "natural science"),
        ("Q2: Which state is highlighted?", ["Ohio", "Utah", "Iowa"], 2, "", "green", "social science"),
        ("Q3: What is the shape?", ["square", "circle"], 0, "", "blue", "natural science"),
        ("Q4: Which word fits?", ["big", "small", "tall"], 1, "A short story.", "yellow", "language science"),
    ]]  # fmt: skip
    mme = [{"question_id": f"{cat}/{n:04d}.png", "image": _img(c, k), "question": q, "answer": a, "category": cat}
           for cat, n, c, k, q, a in [
        ("existence", 1, "red", 1, "Q1: Is there a red square in the image? Please answer yes or no.", "Yes"),
        ("existence", 1, "red", 1, "Q2: Is there a blue square in the image? Please answer yes or no.", "No"),
        ("count", 2, "green", 2, "Q3: Are there two squares in the image? Please answer yes or no.", "Yes"),
        ("count", 2, "green", 2, "Q4: Are there five squares in the image? Please answer yes or no.", "No"),
        ("code_reasoning", 3, "blue", 3, "Q5: Does the code print 3? Please answer yes or no.", "Yes"),
        ("code_reasoning", 3, "blue", 3, "Q6: Does the code print 7? Please answer yes or no.", "No"),
    ]]  # fmt: skip
    libri, videomme = _av_rows()
    return {"mmmu_val": mmmu, "chartqa": chartqa, "docvqa_val": docvqa, "textvqa_val": textvqa, "ai2d": ai2d,
            "scienceqa_img": sqa, "mme": mme, "librispeech_test_clean": libri, "videomme": videomme}  # fmt: skip


TASK_ROWS = _rows()

#: what the scripted server answers per row (same order as TASK_ROWS)
SCRIPTED: dict[str, list[str]] = {
    "mmmu_val": ["A", "The answer is (B).", "There are 3 squares.", "so the ratio is 0.25", "(A)",
                 "I would say that the flag colour is green here", "D", "one"],
    "chartqa": ["43", "yes", "110", "2019", "7.4", "0.12"],
    "docvqa_val": ["John Smith", "12 may 1998", "Dr Alice Brwn", "1,250", "nothing"],
    "textvqa_val": ["Coca Cola", "10", "Stop.", "the exit"],
    "ai2d": ["B. larva", "A", "c", "The answer is C"],
    "scienceqa_img": ["A", "B. Utah", "a", "B."],
    "mme": ["Yes", "No.", "yes, there are", "Nope", "no", "No"],
    "librispeech_test_clean": ["He hoped there would be stew for dinner.", "Mr. Smith paid $20 for the book",
                               "the color of the sky is gray", "stuff it in to you his belly advised him"],
    "videomme": ["A", "The answer is (C).", "C. blue", "I cannot tell"],
}  # fmt: skip


def rules_by_task() -> dict[str, list[tuple[str, str | None, str]]]:
    """(text needle, media SHA-256 or None, answer) per scripted row, by task: the row's question (its "Qn:"
    tag makes it unique within a task), or for LibriSpeech the clip's hash (every clip has the same prompt)."""
    out: dict[str, list[tuple[str, str | None, str]]] = {}
    for task, rows in TASK_ROWS.items():
        mine = out.setdefault(task, [])
        for row, answer in zip(rows, SCRIPTED[task], strict=True):
            if task == "librispeech_test_clean":
                mine.append(("", hashlib.sha256(row["audio"]["bytes"]).hexdigest(), answer))
            elif task == "textvqa_val":  # the prompt capitalises the question
                mine.append((row["question"].capitalize(), None, answer))
            else:
                mine.append((row["question"].split("<image 1>")[-1].strip().split(" Please answer")[0], None, answer))
    return out


def rules() -> list[tuple[str, str | None, str]]:
    """Every task's rules (``rules_by_task``), for one scripted server."""
    return [r for rs in rules_by_task().values() for r in rs]


def _features(task: str) -> Any:
    import datasets as ds

    s, img, seq = ds.Value("string"), ds.Image(), ds.Sequence
    table: dict[str, dict[str, Any]] = {
        "mmmu_val": {"id": s, "question": s, "options": s, "explanation": s,
                     **{f"image_{k}": img for k in range(1, 8)}, "img_type": s, "answer": s,
                     "topic_difficulty": s, "question_type": s, "subfield": s},
        "chartqa": {"type": s, "question": s, "answer": s, "image": img},
        "docvqa_val": {"questionId": s, "question": s, "question_types": seq(s), "image": img,
                       "docId": ds.Value("int32"), "ucsf_document_id": s, "ucsf_document_page_no": s,
                       "answers": seq(s), "data_split": s},
        "textvqa_val": {"image_id": s, "question_id": ds.Value("int32"), "question": s, "question_tokens": seq(s),
                        "image": img, "image_width": ds.Value("int32"), "image_height": ds.Value("int32"),
                        "flickr_original_url": s, "flickr_300k_url": s, "answers": seq(s),
                        "image_classes": seq(s), "set_name": s, "ocr_tokens": seq(s)},
        "ai2d": {"question": s, "options": seq(s), "answer": s, "image": img},
        "scienceqa_img": {"image": img, "question": s, "choices": seq(s), "answer": ds.Value("int8"), "hint": s,
                          "task": s, "grade": s, "subject": s, "topic": s, "category": s, "skill": s,
                          "lecture": s, "solution": s},
        "mme": {"question_id": s, "image": img, "question": s, "answer": s, "category": s},
        "librispeech_test_clean": {"audio": ds.Audio(sampling_rate=16000), "gt": s, "source": s, "task": s},
        "videomme": {k: s for k in ("video_id", "duration", "domain", "sub_category", "url", "videoID",
                                    "question_id", "task_type", "question")} | {"options": seq(s), "answer": s},
    }  # fmt: skip
    return ds.Features(table[task])


#: (hub id, config, {split: rows}) per task, as lmms-eval 0.7.3's task files name them
def _layout() -> dict[str, tuple[str, str | None, dict[str, list[dict[str, Any]]]]]:
    r = TASK_ROWS
    return {
        "mmmu_val": ("lmms-lab-encoder/MMMU", None, {"dev": r["mmmu_val"][:1], "validation": r["mmmu_val"]}),
        "chartqa": ("lmms-lab-encoder/ChartQA", None, {"test": r["chartqa"]}),
        "docvqa_val": ("lmms-lab-encoder/DocVQA", "DocVQA", {"validation": r["docvqa_val"]}),
        "textvqa_val": ("lmms-lab-encoder/textvqa", None, {"train": r["textvqa_val"][:1],
                                                           "validation": r["textvqa_val"]}),
        "ai2d": ("lmms-lab-encoder/ai2d", None, {"test": r["ai2d"]}),
        "scienceqa_img": ("lmms-lab-encoder/ScienceQA", "ScienceQA-IMG", {"test": r["scienceqa_img"]}),
        "mme": ("lmms-lab-encoder/MME", None, {"test": r["mme"]}),
        "librispeech_test_clean": ("lmms-lab-audio/librispeech", "librispeech_test_clean",
                                   {"librispeech_test_clean": r["librispeech_test_clean"]}),
        "videomme": ("lmms-eval/Video-MME", None, {"test": r["videomme"]}),
    }  # fmt: skip


def write_video(path: Path, colours: list[str], frames_per_colour: int = 4) -> None:
    """A short H.264 mp4: ``frames_per_colour`` frames of each colour's square, 8 fps."""
    import av
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=8)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        for c in colours:
            img = np.asarray(Image.open(io.BytesIO(png_of(c, 2, size=64))).convert("RGB"))
            for _ in range(frames_per_colour):
                out.mux(stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        out.mux(stream.encode())


def write_all(hf_home: Path, tasks: list[str] | None = None) -> None:
    """Write the synthetic benchmarks (all, or ``tasks``) into the ``datasets`` cache under ``hf_home``."""
    from lmmbench.testing.hf_datasets import write_dataset_cache

    # datasets imports torchcodec to store any audio cell, even bytes it stores as they are: a stand-in
    # module lets it store the WAV bytes (nothing is encoded)
    stub = "torchcodec.encoders" not in sys.modules
    if stub:
        sys.modules["torchcodec.encoders"] = types.SimpleNamespace(AudioEncoder=None)  # type: ignore[assignment]
    try:
        for task, (repo, config, splits) in _layout().items():
            if tasks is None or task in tasks:
                write_dataset_cache(hf_home, repo, config, splits, _features(task))
    finally:
        if stub:
            sys.modules.pop("torchcodec.encoders", None)
    if tasks is None or "videomme" in tasks:
        write_video(hf_home / "videomme" / "data" / "vidAAA001.mp4", ["red", "green"])
        write_video(hf_home / "videomme" / "data" / "vidBBB002.mp4", ["blue", "yellow", "red"])
