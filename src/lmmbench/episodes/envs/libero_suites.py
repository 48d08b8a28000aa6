"""LIBERO's five suites as lmmbench names them: the table ``episodes.suites`` registers and ``episodes.envs.libero``
reads (a module of its own, so that neither imports the other)."""

from __future__ import annotations

__all__ = ["LIBERO_SUITES", "WARMUP_ACTION"]

#: LIBERO's suites: lmmbench's name -> (LIBERO's benchmark name, openpi's max_steps for it, number of tasks)
LIBERO_SUITES: dict[str, tuple[str, int, int]] = {
    "libero-spatial": ("libero_spatial", 220, 10), "libero-object": ("libero_object", 280, 10),
    "libero-goal": ("libero_goal", 300, 10), "libero-10": ("libero_10", 520, 10), "libero-90": ("libero_90", 400, 90),
}

#: openpi's LIBERO_DUMMY_ACTION (examples/libero/main.py): the warm-up action, standing still with the gripper open
WARMUP_ACTION: tuple[float, ...] = (0.0,) * 6 + (-1.0,)
