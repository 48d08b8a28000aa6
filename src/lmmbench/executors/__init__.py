"""Plans and executors: run many lmmbench runs (specs, perf, eval, with the servers they use) from
one plan file, each in-process, in its own process, in a venv, in a container or as a Ray task.

Layer: above ``sessions`` (a row is a ``run_spec`` / ``run_perf`` / ``run_eval`` call), below ``cli``.
Importing this package registers the built-in executors; Ray and Docker are imported only when used.
"""

from lmmbench.executors import container, local, ray_executor, venvs
from lmmbench.executors.base import EXECUTORS, Executor, ExecutorSettings
from lmmbench.executors.jobs import Job, RowResult, execute_job
from lmmbench.executors.plan import Plan, PlanRow, load_plan

__all__ = ["EXECUTORS", "Executor", "ExecutorSettings", "Job", "Plan", "PlanRow", "RowResult", "container",
           "execute_job", "load_plan", "local", "ray_executor", "venvs"]
