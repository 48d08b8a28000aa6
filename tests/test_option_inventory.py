"""Honoured or refused: every option and config field of the commands users drive most has an entry in
tests/option_inventory.yaml naming the test that proves its effect outside run.json (``effect <node id>``) or
that it is refused with exit 2 where it cannot act (``refused <node id>``); free text only for a fixed allow-list.

The options are read from the CLI itself (typer's click commands, the drop-ins' argparse parsers) and the fields
from the config models, so a new option without an entry fails here. Every named test node must be collected by
pytest. ``known_gap <issue>: why`` marks an option found doing nothing that another open issue owns: listed,
not hidden. The other commands' options are counted under ``not_yet_covered`` (the counts must stay true).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).with_name("option_inventory.yaml")
#: the commands whose every option must have an entry
COMMANDS = ("eval", "perf", "batch", "run episodic-eval", "serve-policy", "envs build-image")
#: what a free-text entry may be about (options that choose where output goes or how much is said)
FREE = {"help", "version", "verbosity", "output", "progress"}
KINDS = ("effect", "refused", "free", "known_gap", "alias", "field_of")


def _typer_commands() -> dict[str, Any]:
    import typer

    from lmmbench.cli.main import build_app

    out: dict[str, Any] = {}

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))
        else:
            out[" ".join(path)] = cmd

    walk(typer.main.get_command(build_app()), ())
    return out


def _click_keys(cmd: Any) -> list[str]:
    keys = []
    for p in cmd.params:
        if p.param_type_name == "argument":
            keys.append(f"<{p.name}>")
        elif p.param_type_name == "option":
            keys.append(next((o for o in p.opts if o.startswith("--")), p.opts[0]))
    return keys


def _argparse_keys(parser: Any) -> list[str]:
    return [a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"]


def _bytemlperf_keys() -> list[str]:
    """The fields ``config.perf.bytemlperf`` reads from a ByteMLPerf workload, in either layout."""
    from lmmbench.config.perf.bytemlperf import WORKLOAD_FIELDS

    return sorted(WORKLOAD_FIELDS)


def options() -> dict[str, list[str]]:
    """Every option / field of the covered commands and files, by section."""
    from lmmbench.config.dropins import aisbench_args
    from lmmbench.config.dropins import sglang_serving as sglang_bench_serving
    from lmmbench.config.dropins import vllm_serve as vllm_bench_serve
    from lmmbench.config.perf.options import PerfConfig
    from lmmbench.executors.plan import PlanRow
    from lmmbench.specs.episodic_eval import EpisodicEvalOptions

    cmds = _typer_commands()
    out = {name: _click_keys(cmds[name]) for name in COMMANDS}
    out["bench serve"] = _argparse_keys(vllm_bench_serve.build_parser())
    out["bench sglang"] = _argparse_keys(sglang_bench_serving.build_parser())
    out["bench ais"] = [*_argparse_keys(aisbench_args._parser()), "<config>"]
    out["plan row"] = list(PlanRow.model_fields)
    out["perf workload file"] = [*PerfConfig.model_fields, "points"]
    out["bytemlperf workload"] = _bytemlperf_keys()
    out["episodic config file"] = list(EpisodicEvalOptions.model_fields)
    return out


def other_commands() -> dict[str, int]:
    """Options of the commands not covered yet, counted."""
    cmds = _typer_commands()
    skip = {*COMMANDS, "bench serve", "bench sglang", "bench ais"}
    return {name: len(_click_keys(cmd)) for name, cmd in sorted(cmds.items()) if name not in skip and cmd.params}


def _inventory() -> dict[str, Any]:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def _entries() -> list[tuple[str, str, str, str]]:
    """(section, key, kind, rest) of every entry."""
    out = []
    for section, entries in _inventory()["sections"].items():
        for key, value in (entries or {}).items():
            kind, _, rest = str(value).partition(" ")
            out.append((section, str(key), kind, rest.strip()))
    return out


def test_every_option_and_field_has_an_entry_and_nothing_else_does() -> None:
    have = {s: set(e or {}) for s, e in _inventory()["sections"].items()}
    missing, stale = [], []
    for section, keys in options().items():
        missing += [f"{section}: {k}" for k in keys if k not in have.get(section, set())]
        stale += [f"{section}: {k}" for k in have.get(section, set()) if k not in keys]
    assert not missing, "options without an entry in tests/option_inventory.yaml:\n" + "\n".join(missing)
    assert not stale, "entries for options that no longer exist:\n" + "\n".join(stale)


def test_entries_are_of_a_known_kind_and_free_text_only_on_the_allow_list() -> None:
    sections = _inventory()["sections"]
    for section, key, kind, rest in _entries():
        assert kind in KINDS, (section, key, kind)
        if kind == "free":
            assert rest.split(":")[0] in FREE, (section, key, rest)
        if kind in ("effect", "refused"):
            assert "::" in rest and rest.startswith("tests/"), (section, key, rest)
        if kind == "known_gap":
            assert rest.split(":")[0].isdigit(), (section, key, rest)  # the open issue that owns it
        if kind == "alias":
            assert rest in sections[section] and not str(sections[section][rest]).startswith("alias"), (key, rest)
        if kind == "field_of":  # a file field read into the same model field as a command's option
            target_section, _, target = rest.partition(" | ")
            assert target in sections[target_section], (section, key, rest)


def test_other_commands_are_counted_as_not_yet_covered() -> None:
    assert _inventory()["not_yet_covered"] == other_commands()


def test_every_named_test_node_is_collected() -> None:
    """One ``pytest --collect-only`` over the named test files (about 30 s of imports on a 2-core box)."""
    named = {rest.split(" ")[0] for _, _, kind, rest in _entries() if kind in ("effect", "refused")}
    named |= {rest.split(": ", 1)[1] for _, _, kind, rest in _entries()
              if kind == "known_gap" and rest.split(": ", 1)[-1].startswith("tests/")}  # fmt: skip
    files = sorted({n.split("::")[0] for n in named})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    collected = {line.strip() for line in proc.stdout.splitlines() if "::" in line}
    functions = {c.split("[")[0] for c in collected}
    absent = sorted(n for n in named if n not in collected and n not in functions)
    assert not absent, f"named test nodes not collected:\n{chr(10).join(absent)}\n{proc.stderr[-2000:]}"


def test_known_gaps_are_listed() -> None:
    """Options found doing nothing that another open issue owns: printed for the record, each with its issue."""
    gaps = [f"{s}: {k} -> issue {r}" for s, k, kind, r in _entries() if kind == "known_gap"]
    print("\n".join(gaps))
    assert all(g.split("-> issue ")[1].split(":")[0].isdigit() for g in gaps)
