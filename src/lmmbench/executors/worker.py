"""The worker entry point of isolated executors: ``python -m lmmbench.executors.worker JOB.json``.

It reads the resolved job (written by the driver, as AISBench's runner writes each task's config),
runs it with ``execute_job`` and writes ``result.json`` next to the job file. A row that fails
still writes its result (status ``failed``) and exits 0; a worker that dies writes nothing, which
the pool reads as a crash and retries. SIGTERM and SIGINT (the plan being stopped) end the row as
``interrupted``, with what it measured written and counted.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from lmmbench.executors.jobs import Job, execute_job, write_result

RESULT_NAME = "result.json"


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C: every ``except KeyboardInterrupt`` flush of the run runs; a second one ends at once."""
    from lmmbench.core.signals import record_stop_signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    record_stop_signal(signum)
    raise KeyboardInterrupt



def main(argv: list[str]) -> int:
    """Run the job file ``argv[0]``; relative row folders are taken from the job file's folder."""
    if len(argv) != 1:
        print("usage: python -m lmmbench.executors.worker JOB.json", file=sys.stderr)
        return 2
    from lmmbench.core.signals import install_main_only

    install_main_only(signal.SIGTERM, _on_sigterm)
    from lmmbench.executors.venv_cache import hold_running_venv

    lease = hold_running_venv()  # a venv row: its venv is not pruned while this worker runs
    job_path = Path(argv[0]).resolve()
    job = Job.model_validate(json.loads(job_path.read_text(encoding="utf-8")))
    if not Path(job.row_dir).is_absolute():
        job = job.model_copy(update={"row_dir": str((job_path.parent / job.row_dir).resolve())})
    (job_path.parent / f"worker-{os.getpid()}.pid").write_text(str(os.getpid()), encoding="utf-8")
    result = execute_job(job)
    write_result(result, job_path.parent / RESULT_NAME)
    if lease is not None:
        lease.release()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
