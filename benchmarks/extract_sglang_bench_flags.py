"""Read the argument parser of ``python -m sglang.bench_serving`` from SGLang's own source files and write it as
data (src/lmmbench/config/dropins/sglang_serving_flags.json), from which ``lmmbench bench sglang`` builds its parser.

    pip download --no-deps sglang==0.5.23 -d /tmp/sglang
    unzip -q /tmp/sglang/*.whl 'sglang/benchmark/*' -d /tmp/sglang/src
    python benchmarks/extract_sglang_bench_flags.py /tmp/sglang/src \
        > src/lmmbench/config/dropins/sglang_serving_flags.json

``sglang.bench_serving`` is a shim over ``sglang.benchmark.serving``, whose ``cli_main`` builds its parser inline
and then parses ``sys.argv``. That module (and ``sglang.benchmark.goodput``, whose SLO names the ``--goodput`` help
uses) is loaded from the files with every other import replaced by a stub; ``ArgumentParser.parse_args`` is
intercepted so that ``cli_main`` hands its finished parser over instead of running a benchmark. Nothing of SGLang
is kept but each flag's names, default, type, choices, group and help.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from peer_stubs import StubLoader

REAL = {"sglang.benchmark.serving", "sglang.benchmark.goodput"}
PACKAGES = {"sglang", "sglang.benchmark"}
STUBBED_TOP = ("aiohttp", "msgspec", "numpy", "orjson", "requests", "tqdm", "transformers")


class Finder:
    """The two real modules from the files in ``src``; the rest of sglang and its heavy imports as stubs."""

    def __init__(self, src: Path) -> None:
        self.src = src

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        top = name.split(".")[0]
        if top != "sglang" and top not in STUBBED_TOP:
            return None
        if name in REAL:
            return importlib.util.spec_from_file_location(name, self.src / (name.replace(".", "/") + ".py"))
        return importlib.util.spec_from_loader(name, loader=StubLoader(), is_package=True)  # type: ignore[arg-type]


class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("parser captured")
        self.parser = parser


def _capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
    raise Captured(self)


def _flag(parser: argparse.ArgumentParser, a: argparse.Action) -> dict[str, Any]:
    default = a.default
    try:
        json.dumps(default)
    except TypeError:
        default = repr(default)
    if isinstance(default, float) and default == float("inf"):
        default = "inf"
    group = next((g.title for g in parser._action_groups if a in g._group_actions), None)
    exclusive = next((i for i, g in enumerate(parser._mutually_exclusive_groups) if a in g._group_actions), None)
    kind = getattr(a.type, "__name__", None) if a.type else None
    return {"flags": a.option_strings, "dest": a.dest, "action": type(a).__name__, "type": kind, "nargs": a.nargs,
            "default": default, "choices": list(a.choices) if a.choices else None, "metavar": a.metavar,
            "help": (a.help or "").strip()[:400], "group": group, "exclusive_group": exclusive}  # fmt: skip


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sglang/src")
    sys.meta_path.insert(0, Finder(src))  # type: ignore[arg-type]
    serving = importlib.import_module("sglang.benchmark.serving")
    argparse.ArgumentParser.parse_args = _capture  # type: ignore[assignment,method-assign]
    try:
        serving.cli_main()
    except Captured as got:
        parser = got.parser
    else:
        raise SystemExit("cli_main returned without parsing: has sglang's entry point changed?")
    flags = [_flag(parser, a) for a in parser._actions if a.option_strings and "-h" not in a.option_strings]
    source = ("sglang 0.5.23 (its wheel): sglang/bench_serving.py, a shim over sglang/benchmark/serving.py cli_main, "
              "read by benchmarks/extract_sglang_bench_flags.py")  # fmt: skip
    print(json.dumps({"source": source, "usage": serving.__doc__.strip(), "flags": flags}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
