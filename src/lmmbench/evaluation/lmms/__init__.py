"""lmms-eval's standard multimodal benchmarks, by lmms-eval's names, written natively (docs/eval.md).

``mmmu_val``, ``chartqa``, ``docvqa_val``, ``textvqa_val``, ``ai2d``, ``scienceqa_img``, ``mme``,
``librispeech_test_clean``, ``videomme``: data from the Hugging Face ``datasets`` cache in each data
set's own schema; prompts, answer extraction and metrics as lmms-eval 0.7.3 defines them.
"""

from __future__ import annotations

from lmmbench.core.errors import UserError
from lmmbench.core.registry import Registry
from lmmbench.evaluation.lmms.av_tasks import AV_TASKS
from lmmbench.evaluation.lmms.image_tasks import IMAGE_TASKS
from lmmbench.evaluation.lmms.spec import LmmsTask

__all__ = ["LMMS_TASKS", "LmmsTask", "get_lmms_task", "is_lmms_task"]

LMMS_TASKS: Registry[LmmsTask] = Registry("lmms_tasks")
for _t in (*IMAGE_TASKS, *AV_TASKS):
    LMMS_TASKS.add(_t.name, _t)


def is_lmms_task(name: str) -> bool:
    """True for a benchmark name of this package."""
    return name in LMMS_TASKS


def get_lmms_task(name: str) -> LmmsTask:
    """The benchmark ``name``."""
    if name not in LMMS_TASKS:
        raise UserError(f"unknown lmms-eval benchmark '{name}'; known: {', '.join(LMMS_TASKS.names())}")
    return LMMS_TASKS.get(name)
