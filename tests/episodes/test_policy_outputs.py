"""Users' policies (bad input round 5): what a policy returns is checked and named (None, a string, a (1, H, A)
array for one observation, a dict without 'actions'), an action wider than the environment's is refused, never cut
to its width, and a module on the meta device is one line, not a crash in lmmbench's own ``.to(device)``."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmbench.cli.main import main

POLICIES = """
import numpy as np
import torch


class Wide7:
    def infer(self, obs):
        return {"actions": np.zeros((4, 7))}


class Wide32:
    def infer(self, obs):
        return np.zeros(32)


class ReturnsNone:
    def infer(self, obs):
        return None


class ReturnsText:
    def infer(self, obs):
        return "left"


class OneByHByA:
    def infer(self, obs):
        return np.zeros((1, 4, 2))


class ActionKey:
    def infer(self, obs):
        return {"action": np.zeros(2)}


class OnMeta(torch.nn.Module):
    def __init__(self):
        super().__init__()
        with torch.device("meta"):
            self.head = torch.nn.Linear(4, 2)

    def forward(self, batch):
        return self.head(batch)
"""

CASES = {
    "Wide7": "2 values (dx, dy), got 7",
    "Wide32": "2 values (dx, dy), got 32",
    "ReturnsNone": "infer() returned NoneType; a policy returns actions",
    "ReturnsText": "infer() returned str; a policy returns actions",
    "OneByHByA": "infer() returned shape (1, 4, 2) for one observation",
    "ActionKey": "did you mean 'actions'?",
    "OnMeta": "meta device",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", sorted(CASES))
def test_a_policys_output_is_checked_with_what_a_policy_must_return(policy: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.py").write_text(POLICIES)
    code = main(["run", "episodic-eval", "--policy", f"{tmp_path / 'mine.py'}:{policy}", "--num-tasks", "1",
                 "--num-trials-per-task", "1", "--num-steps-wait", "0", "--no-progress", "--out-dir",
                 str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    errors = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2 and len(errors) == 1 and CASES[policy] in errors[0] and "Traceback" not in err, err[-2000:]
