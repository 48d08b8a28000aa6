"""config.registry_field: a field checked against a registry's names when validated, not a Literal copy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, ValidationError

from lmmbench.config.registry_field import registered_in, registry_at
from lmmbench.core.errors import user_error_from_validation
from lmmbench.loadgen.arrivals import ARRIVALS


class _Load(BaseModel):
    arrival: Annotated[str, registered_in("lmmbench.loadgen.arrivals:ARRIVALS")] = "poisson"
    maybe: Annotated[str | None, registered_in("lmmbench.loadgen.arrivals:ARRIVALS")] = None


def test_a_registered_name_passes_and_an_unknown_one_lists_the_known() -> None:
    assert _Load(arrival="constant").arrival == "constant"
    assert _Load().maybe is None
    with pytest.raises(ValidationError) as info:
        _Load(arrival="no-such-arrival")
    line = str(user_error_from_validation(info.value, "load.yaml"))
    assert line.startswith("load.yaml: arrival: unknown arrivals 'no-such-arrival'; known: ")
    assert "constant" in line and "poisson" in line


def test_a_name_registered_later_is_valid_without_touching_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError):
        _Load(arrival="later-plugin")
    monkeypatch.setitem(ARRIVALS.entries, "later-plugin", ARRIVALS.get("constant"))
    assert _Load(arrival="later-plugin").arrival == "later-plugin"


def test_a_bad_registry_path_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match=r"package\.module:NAME"):
        registry_at("lmmbench.loadgen.arrivals")
    with pytest.raises(TypeError, match="not a Registry"):
        registry_at("lmmbench.loadgen.arrivals:__all__")


def test_the_registry_module_is_imported_only_when_a_value_is_validated() -> None:
    code = textwrap.dedent("""
        import sys
        from typing import Annotated
        from pydantic import BaseModel
        from lmmbench.config.registry_field import registered_in
        class M(BaseModel):
            arrival: Annotated[str, registered_in("lmmbench.loadgen.arrivals:ARRIVALS")] = "poisson"
        before = "lmmbench.loadgen.arrivals" in sys.modules
        M(arrival="constant")
        print(before, "lmmbench.loadgen.arrivals" in sys.modules)
    """)
    src = Path(__file__).resolve().parents[1] / "src"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.stdout.split() == ["False", "True"]


def test_the_cli_help_lists_the_registered_names(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer
    from typer.testing import CliRunner

    from lmmbench.config.cli_options import command_from_model

    monkeypatch.setenv("COLUMNS", "200")
    app = typer.Typer()
    command_from_model(app, "load", _Load, lambda cfg: print(cfg.arrival))
    command_from_model(app, "other", _Load, lambda cfg: None)  # two commands: typer keeps the name
    runner = CliRunner()
    helped = runner.invoke(app, ["load", "--help"])
    assert "one of: constant, gamma, poisson, or a plugin's" in " ".join(helped.output.split())
    ran = runner.invoke(app, ["load", "--arrival", "no-such"])
    assert ran.exit_code != 0 and "unknown arrivals 'no-such'" in str(ran.exception)
    assert runner.invoke(app, ["load", "--arrival", "gamma"]).output.strip() == "gamma"
