"""Core pieces: the registry, the CLI face, config-derived options."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from lmmbench.cli.main import main
from lmmbench.config.cli_options import command_from_model
from lmmbench.core import Registry, RegistryError, UserError


def test_registry_registers_lists_and_rejects_collisions() -> None:
    reg: Registry[int] = Registry("numbers")
    reg.add("one", 1)

    @reg.register("two")
    def _two() -> int:
        return 2

    assert reg.get("one") == 1
    assert reg.names() == ["one", "two"]
    assert "one" in reg and "three" not in reg
    with pytest.raises(RegistryError, match="already registered"):
        reg.add("one", 11)
    with pytest.raises(RegistryError, match="known: one, two"):
        reg.get("three")


def test_cli_version_and_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert "lmmbench" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2


class _Cfg(BaseModel):
    """Demo command."""

    rate: float = Field(1.0, description="Requests per second.")
    mode: Literal["a", "b"] = "a"
    tags: list[str] = Field(default_factory=list)
    slo: dict[str, float] = Field(default_factory=dict)
    stream: bool = True


def test_command_from_model_derives_options_and_validates() -> None:
    app = typer.Typer()
    seen: list[_Cfg] = []
    command_from_model(app, "demo", _Cfg, seen.append)

    @app.command("other")
    def _other() -> None:
        """Keeps typer in multi-command mode."""

    runner = CliRunner()
    res = runner.invoke(app, ["demo", "--rate", "2.5", "--mode", "b", "--tags", "x,y", "--slo", "ttft_ms=5",
                              "--no-stream"])
    assert res.exit_code == 0, res.output
    assert seen[-1] == _Cfg(rate=2.5, mode="b", tags=["x", "y"], slo={"ttft_ms": 5.0}, stream=False)
    res = runner.invoke(app, ["demo", "--mode", "c"])
    assert isinstance(res.exception, UserError)
    assert "mode" in str(res.exception)
    help_text = runner.invoke(app, ["demo", "--help"]).output
    assert "Requests per second" in help_text and "one of: a, b" in help_text


def test_cli_import_pulls_no_heavy_library() -> None:
    """`pip install lmmbench` is a load-testing client: the CLI must start without torch."""
    import subprocess
    import sys

    code = (
        "import sys, lmmbench.cli.main as m; m.build_app(); "
        "heavy = [x for x in ('torch', 'transformers', 'av', 'matplotlib', 'fastapi') if x in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at CLI start-up: {out.stdout.strip()}"


def test_missing_optional_library_names_the_extra_to_install() -> None:
    """A core-only install running an in-process command gets the pip line, not a traceback."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None; "  # as if torch were not installed
        "from lmmbench.cli.main import main; sys.exit(main(['models', 'build', 'tiny-llm', '--force']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "lmmbench[models]" in out.stderr and "Traceback" not in out.stderr


class _Row(BaseModel):
    name: str
    rate: float = Field(gt=0)


def test_validation_error_becomes_one_line_naming_where_and_field() -> None:
    from pydantic import ValidationError

    from lmmbench.core.errors import user_error_from_validation, validation_detail

    with pytest.raises(ValidationError) as info:
        _Row.model_validate({"rate": -1})
    exc = info.value
    assert validation_detail(exc) == ("name", "Field required", 1)
    err = user_error_from_validation(exc, "plan.csv: row 2", field="options.{}", more=True)
    assert str(err) == "plan.csv: row 2: options.name: Field required (+1 more)" and err.exit_code == 2
    with pytest.raises(ValidationError) as info:
        _Row.model_validate("not a mapping")
    assert str(user_error_from_validation(info.value, root="(row)")).startswith("(row): Input should be")


def test_a_plugin_that_failed_to_load_is_tried_again_when_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a plugin module that is still being imported when a registry first loads its group fails; asked for
    # by name later, it loads (a real EntryPoint, a real module on sys.path)
    from importlib.metadata import EntryPoint

    import lmmbench.core.registry as registry_module

    (tmp_path / "late_plugin.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = EntryPoint("late", "late_plugin:VALUE", "lmmbench.numbers")
    monkeypatch.setattr(registry_module, "entry_points", lambda group: [ep] if group == "lmmbench.numbers" else [])
    reg: Registry[int] = Registry("numbers")
    assert reg.names() == [] and "late" not in reg
    import late_plugin

    late_plugin.VALUE = 7  # type: ignore[attr-defined]
    assert reg.get("late") == 7 and reg.names() == ["late"]
