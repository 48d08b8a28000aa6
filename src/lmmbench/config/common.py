"""Fields every command that loads a model or writes results shares, so ``--device``, ``--dtype``,
``--threads`` and ``--out-dir`` have one name, one default and one meaning across commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

__all__ = [
    "DEFAULT_OUT_DIR",
    "HUB_MODEL_HELP",
    "Dtype",
    "baseline_field",
    "device_field",
    "dtype_field",
    "mlflow_field",
    "out_dir_field",
    "revision_field",
    "threads_field",
    "wandb_field",
    "with_revision",
]

#: The root of every command's results (perf, spec runs, eval, reference comparisons).
DEFAULT_OUT_DIR = Path("lmmbench-results")
Dtype = Literal["auto", "float32", "bfloat16", "float16"]


def device_field() -> Any:
    """``--device``: auto (CUDA when present, else CPU), cpu, cuda or cuda:N."""
    return Field("auto", pattern=r"^(auto|cpu|mps|cuda(:\d+)?|xpu(:\d+)?|npu(:\d+)?)$",
                 description="Where the model runs: auto (CUDA if present, else CPU), cpu, cuda, cuda:N.")


def dtype_field() -> Any:
    """``--dtype``: auto (bfloat16 on CUDA, float32 on CPU) or a torch dtype name."""
    return Field("auto", description="Model dtype (auto: bfloat16 on CUDA, float32 on CPU).")


def threads_field() -> Any:
    """``--threads``: torch CPU threads."""
    return Field(None, ge=1, description="torch CPU threads (default: torch's choice; 1 gives steadier timings "
                                         "on a shared machine).")  # fmt: skip


def out_dir_field(layout: str, sub: str = "") -> Any:
    """``--out-dir`` under ``lmmbench-results`` (``sub`` a sub-folder); ``layout`` says what goes where."""
    return Field(DEFAULT_OUT_DIR / sub if sub else DEFAULT_OUT_DIR, description=layout)


HUB_MODEL_HELP = ("a Hugging Face hub id (ORG/NAME, resolved through the local hub cache; HF_HUB_OFFLINE, HF_HOME "
                  "and HF_HUB_CACHE are honoured)")


def revision_field() -> Any:
    """``--revision REV``: the hub revision of a hub-id ``--model`` (as ``ORG/NAME@REV``)."""
    return Field(None, description="Hub revision (branch, tag or commit) of a hub-id --model; the same as "
                                   "--model ORG/NAME@REV.")


def with_revision(model: str | None, revision: str | None) -> str | None:
    """``model@revision`` when a revision is given for a model that names none."""
    if not revision or not model or "@" in model:
        return model
    return f"{model}@{revision}"


def baseline_field() -> Any:
    """``--baseline RUN``: the run a finished run is compared with in its report (default: its previous one)."""
    return Field(None, description="Compare the finished run with this run in its report and console (an id, id "
                                   "prefix, folder or name; default: the newest earlier run of the same name).")


def mlflow_field() -> Any:
    """``--mlflow URI``: log the finished run's config and headline metrics to MLflow."""
    return Field(None, description="Log config and headline metrics to this MLflow tracking URI (e.g. "
                                   "file:///tmp/mlruns; needs mlflow).")  # fmt: skip


def wandb_field() -> Any:
    """``--wandb PROJECT``: log the finished run to Weights & Biases."""
    return Field(None, description="Log config and headline metrics to this W&B project (needs wandb; "
                                   "WANDB_MODE=offline works without an account).")  # fmt: skip
