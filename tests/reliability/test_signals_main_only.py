"""lmmbench's signal handlers act in lmmbench's own process only: a process forked by lm-eval (its bootstrap
pool), datasets, torch or multiprocessing gets the default handlers, so a pool stopped with SIGTERM ends quietly
instead of printing ``Process ForkPoolWorker-N: Traceback ... Terminated``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

POOL_UNDER_MAIN = textwrap.dedent("""
    import multiprocessing as mp, signal, sys, time
    import typer
    import lmmbench.cli.main as cli

    app = typer.Typer()

    @app.command()
    def pool() -> None:
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None), "main() installed its handler"
        p = mp.get_context("fork").Pool(2)
        assert p.map(abs, [-1, -2, -3]) == [1, 2, 3]
        p.map_async(time.sleep, [30, 30])  # both workers busy when the pool stops them (as lm-eval's bootstrap)
        time.sleep(0.5)
        p.terminate()
        p.join()
        codes = [w.exitcode for w in p._pool]
        assert codes == [-signal.SIGTERM] * 2, codes

    @app.command()
    def other() -> None:
        pass

    cli.build_app = lambda: app
    sys.exit(cli.main(["pool"]))
""")


def test_a_forked_pool_stopped_by_sigterm_under_main_prints_no_traceback() -> None:
    proc = subprocess.run([sys.executable, "-c", POOL_UNDER_MAIN], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Terminated" not in proc.stderr, proc.stderr[-3000:]


FORK_KEEPING_THE_HANDLER = textwrap.dedent("""
    import os, signal, sys
    from lmmbench.core import signals

    def handler(num, frame):
        print("main handler ran", flush=True)

    signals.install_main_only(signal.SIGTERM, handler)
    wrapper = signal.getsignal(signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)  # the main process: the handler acts
    pid = os.fork()
    if pid == 0:
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the fork hook restored the default"
        signal.signal(signal.SIGTERM, wrapper)  # as a fork that skipped the hook would keep it
        os.kill(os.getpid(), signal.SIGTERM)
        os._exit(0)  # not reached: the default action ends the child
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
""")


def test_a_child_that_kept_the_handler_gets_the_default_action() -> None:
    proc = subprocess.run([sys.executable, "-c", FORK_KEEPING_THE_HANDLER], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:2] == ["main handler ran", "child -15"], proc.stdout + proc.stderr
