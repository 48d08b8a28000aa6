"""The user's own policy and environment fail as the user's: an exception (or ``sys.exit``) raised by their module's
import, their class's constructor or one of its methods, a name that is no class, or a built-in function, is one
line naming the option, the class and the exception, exit 2, and no crash file (the crash file and exit 1 stay for
lmmbench's own bugs). Real files, real runs of ``lmmbench run episodic-eval``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lmmbench.cli.main import main

MODULE = '''
import numpy as np
import os
from lmmbench.episodes import SimplePolicy

if os.environ.get("I35_EXIT_AT_IMPORT"):
    raise SystemExit(3)

NOT_A_CLASS = 3


class Line:
    """Reward 1 per step, ends after 4 steps."""

    def __init__(self, task):
        self.n = 0

    def reset(self, seed=None):
        self.n = 0
        return np.zeros(1), {"success": False}

    def step(self, action):
        self.n += 1
        return np.zeros(1), 1.0, self.n >= 4, False, {"success": self.n >= 4}


class EnvBrokenInit(Line):
    def __init__(self, task):
        raise RuntimeError("env init boom")


class EnvStepFailsLater(Line):
    calls = 0

    def step(self, action):
        type(self).calls += 1
        if type(self).calls > 3:
            raise KeyError("late step boom")
        return super().step(action)


class Zero(SimplePolicy):
    def dummy_action(self):
        return 0

    def act(self, items):
        return [[0] for _ in items]


class PolicyBrokenInit(Zero):
    def __init__(self, settings):
        raise ValueError("policy init boom")


class PolicyExits(Zero):
    def __init__(self):
        import sys
        sys.exit(3)


class PolicyActFailsLater(Zero):
    calls = 0

    def act(self, items):
        type(self).calls += 1
        if type(self).calls > 2:
            raise ZeroDivisionError("act boom")
        return super().act(items)
'''


@pytest.fixture
def user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "mine.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(user_dir: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    out = user_dir / f"out{len(list(user_dir.iterdir()))}"
    # --num-steps-wait 0: the design's 10 warm-up steps would outlast --max-steps 6 and never call act()
    code = main(["run", "episodic-eval", "--num-tasks", "2", "--num-trials-per-task", "2", "--max-steps", "6",
                 "--num-steps-wait", "0", "--no-progress", "--out-dir", str(out), *args])  # fmt: skip
    return code, capsys.readouterr().err.strip().splitlines()


def _crash_files() -> list[str]:
    logs = Path(os.environ["LMMBENCH_HOME"]) / "logs"
    return sorted(p.name for p in logs.glob("crash-*")) if logs.is_dir() else []


@pytest.mark.parametrize(("args", "says"), [
    (["--env", "mine.py:Line", "--policy", "mine.py:PolicyBrokenInit"],
     "--policy mine.py:PolicyBrokenInit: PolicyBrokenInit() raised ValueError: policy init boom"),
    (["--env", "mine.py:EnvBrokenInit", "--policy", "mine.py:Zero"],
     "--env mine.py:EnvBrokenInit: EnvBrokenInit() raised RuntimeError: env init boom"),
    (["--env", "mine.py:Line", "--policy", "mine.py:PolicyExits"],
     "--policy mine.py:PolicyExits: PolicyExits() raised SystemExit: 3"),
    (["--env", "mine.py:Line", "--policy", "mine.py:NOT_A_CLASS"],
     "--policy mine.py:NOT_A_CLASS: NOT_A_CLASS is a int, not a class"),
    (["--env", "mine.py:Line", "--policy", "os:system"], "--policy os:system: system is a built-in function"),
    (["--env", "mine.py:Line", "--policy", "mine.py:PolicyActFailsLater"],
     "--policy mine.py:PolicyActFailsLater: PolicyActFailsLater.act() raised ZeroDivisionError: act boom"),
    (["--env", "mine.py:EnvStepFailsLater", "--policy", "mine.py:Zero"],
     "--env mine.py:EnvStepFailsLater: EnvStepFailsLater.step() raised KeyError: 'late step boom'"),
    (["--env", "mine.py:EnvStepFailsLater", "--policy", "mine.py:Zero", "--env-workers", "2", "--num-parallel", "2"],
     "--env mine.py:EnvStepFailsLater: EnvStepFailsLater.step() raised KeyError: 'late step boom'"),
])  # fmt: skip
def test_the_users_code_fails_as_the_users(user_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                           says: str) -> None:  # fmt: skip
    before = _crash_files()
    code, err = _run(user_dir, capsys, *args)
    assert code == 2 and len(err) == 1 and says in err[0], (code, err)
    assert _crash_files() == before  # not reported as lmmbench's bug


def test_sys_exit_at_import_is_one_line(user_dir: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("I35_EXIT_AT_IMPORT", "1")
    code, err = _run(user_dir, capsys, "--env", "mine.py:Line", "--policy", "mine.py:Zero")
    assert code == 2 and len(err) == 1, (code, err)
    assert "--env mine.py:Line: importing mine.py failed (SystemExit: 3)" in err[0]


def test_a_working_pair_still_runs(user_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The guard changes nothing for code that works: every episode measured, exit 0."""
    code, err = _run(user_dir, capsys, "--env", "mine.py:Line", "--policy", "mine.py:Zero")
    assert code == 0, err
