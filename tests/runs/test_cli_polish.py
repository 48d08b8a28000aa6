"""The derived CLI: options grouped in help panels, no `<bool>` labels, and one name and default for
--device, --dtype, --threads and --out-dir across the commands that take them."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from lmmbench.cli.main import build_app

COMMANDS = [["run", "ttft-breakdown"], ["eval"], ["reference", "dump"], ["reference", "compare"], ["serve"]]


def _help(argv: list[str]) -> str:
    res = CliRunner().invoke(build_app(), [*argv, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    return res.output


def _bool_labels(text: str) -> list[str]:
    """Option lines that show a ``<bool>`` type label. typer 0.29 labels its own ``--help`` so, which lmmbench leaves
    alone (changing it would mean patching typer); lmmbench's flags carry an empty metavar and show none."""
    return [ln.strip() for ln in text.splitlines() if "<bool>" in ln and "--help" not in ln]


def _default(text: str, option: str) -> str | None:
    line = next((ln for ln in text.splitlines() if re.search(rf"{option}\b", ln)), "")
    m = re.search(r"\[default: ([^\]]+)\]", line)
    return m.group(1) if m else None


def test_perf_help_is_grouped_in_panels_without_bool_labels() -> None:
    text = _help(["perf"])
    for panel in ("Server", "Dataset", "Load", "SLOs and search", "Output"):
        assert re.search(rf"─ {panel} ─", text), panel
    assert not _bool_labels(text) and "--plots" in text


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a))
def test_device_dtype_threads_share_names_and_defaults(argv: list[str]) -> None:
    text = _help(argv)
    assert not _bool_labels(text)
    assert re.search(r"─ Model and device ─", text)
    assert _default(text, "--device") == "auto" and _default(text, "--dtype") == "auto"
    assert "--threads" in text and "--num-threads" not in text
    out = _default(text, "--out-dir") or _default(text, "--out")
    if "serve" not in argv:
        assert out is not None and out.startswith("lmmbench-results"), out


def test_the_root_help_shows_no_type_labels_on_its_flags() -> None:
    text = _help([])
    lines = {opt: next(ln for ln in text.splitlines() if f"{opt} " in ln) for opt in ("--version", "--help")}
    assert all("<" not in ln for ln in lines.values()), lines  # no <bool>, the --help line included
    assert "NAME=VALUE" in next(ln for ln in text.splitlines() if "--limit" in ln)


def _leaf_commands() -> list[list[str]]:
    import typer

    def walk(cmd: object, path: list[str]) -> list[list[str]]:
        subs = getattr(cmd, "commands", None)
        if not subs:
            return [path]
        return [p for name, sub in sorted(subs.items()) for p in walk(sub, [*path, name])]

    return walk(typer.main.get_command(build_app()), [])


def test_no_help_text_loses_an_extras_name_to_markup() -> None:
    """``lmmbench[libero]`` in a help text: rich markup reads ``[libero]`` as a tag unless escaped, leaving
    ``lmmbench)`` behind. Every command's help is rendered and searched."""
    eaten = {}
    for argv in _leaf_commands():
        res = CliRunner().invoke(build_app(), [*argv, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        flat = re.sub(r"[│\s]+", " ", res.output)
        if re.search(r"(?<![/\w])lmmbench ?\)", flat):  # "(LIBERO; lmmbench)"; a path's "~/.cache/lmmbench)" is not
            eaten[" ".join(argv)] = re.findall(r".{30}lmmbench ?\)", flat)
    assert not eaten, eaten


def test_help_texts_that_name_an_extra_show_it_whole() -> None:
    text = _help(["run", "episodic-eval"])
    flat = re.sub(r"[│\s]+", " ", text)  # rich wraps the column: join its lines back
    assert "lmmbench[libero]" in flat and "lmmbench[episodes]" in flat
    assert "(LIBERO; lmmbench)" not in flat
