"""The top of ByteMLPerf's ``report.json`` as its reporter (``llm_perf/utils/reporter.py``) writes it, for a perf
run: ``Model`` is the task (the workload file's name), ``Backend`` the hardware type it ran on (its launcher's
``--hardware_type``), ``Host Info`` the CPU, ``Version`` ByteMLPerf's version (its ``VERSION`` file, null when the
workload did not come from a ByteMLPerf checkout), ``Execution Date`` when the run started (local time, its
format), ``Min New Tokens`` / ``Max New Tokens`` as its launcher sets them (1 and 512 whatever the workload says,
and absent when ``test_perf`` is false). lmmbench's own facts go under ``lmmbench``: the served model id, the
engine as the server names itself, lmmbench's version, where the hardware type came from, how servers started."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LAUNCHER_NEW_TOKENS", "ReportHeader", "detect_hardware_type"]

#: ByteMLPerf's launcher builds its Reporter with min_new_tokens=1, max_new_tokens=512 (``launch.py``).
LAUNCHER_NEW_TOKENS = (1, 512)


def detect_hardware_type() -> str:
    """``GPU`` when this machine has an NVIDIA GPU (its driver lists one), else ``CPU``."""
    gpus = Path("/proc/driver/nvidia/gpus")
    try:
        return "GPU" if gpus.is_dir() and any(gpus.iterdir()) else "CPU"
    except OSError:
        return "CPU"


@dataclass
class ReportHeader:
    """What report.json says above its Accuracy and Performance sections."""

    host_info: str
    task: str | None = None  # the ByteMLPerf workload's name; None without a workload (Model: the served id)
    hardware_type: str | None = None
    hardware_source: str = "detected on the machine lmmbench ran on"
    version: str | None = None
    new_tokens: tuple[int | None, int | None] | None = None
    perf_tested: bool = True
    execution_date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    facts: dict[str, Any] = field(default_factory=dict)  # lmmbench's own: served model, engine, servers

    def fields(self, served_model: str | None, out_tokens: list[Any]) -> dict[str, Any]:
        """ByteMLPerf's keys in its reporter's order (Accuracy and Performance are the caller's)."""
        new_tokens = self.new_tokens or (min((x for x in out_tokens if x), default=None),
                                         max((x for x in out_tokens if x), default=None))  # fmt: skip
        head: dict[str, Any] = {
            "Model": self.task if self.task is not None else served_model,
            "Backend": self.hardware_type or detect_hardware_type(),
            "Host Info": self.host_info, "Version": self.version, "Execution Date": self.execution_date,
        }  # fmt: skip
        if self.perf_tested:  # ByteMLPerf's summary() pops both when test_perf is false
            head.update({"Min New Tokens": new_tokens[0], "Max New Tokens": new_tokens[1]})
        return head

    def lmmbench(self, served_model: str | None) -> dict[str, Any]:
        """lmmbench's facts, under its own key."""
        from lmmbench import __version__

        return {"served_model": served_model, "lmmbench_version": __version__,
                "backend_source": "--hardware-type" if self.hardware_type else self.hardware_source,
                **self.facts}  # fmt: skip
