"""Read the argument parser of ``vllm bench serve`` from vLLM's own source files and write it as data
(src/lmmbench/config/dropins/vllm_serve_flags.json), from which ``lmmbench bench serve`` builds its parser.

    pip download --no-deps --only-binary=:all: vllm==0.33.0 -d /tmp/vllm
    unzip -q /tmp/vllm/*.whl 'vllm/*' -d /tmp/vllm/src
    python benchmarks/extract_vllm_bench_flags.py /tmp/vllm/src > src/lmmbench/config/dropins/vllm_serve_flags.json

vLLM's ``vllm.benchmarks`` modules are loaded from the files, every other import replaced by a stub, and its
``add_cli_args`` is run on a plain ``argparse`` parser; nothing of vLLM is kept but each flag's names, default,
type, choices, group and help.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from peer_stubs import Stub, StubLoader

REAL = {"vllm", "vllm.benchmarks", "vllm.benchmarks.serve", "vllm.benchmarks.datasets",
        "vllm.benchmarks.datasets.datasets", "vllm.benchmarks.datasets.utils", "vllm.benchmarks.lib",
        "vllm.benchmarks.lib.endpoint_request_func"}  # fmt: skip


class Finder:
    """vllm.benchmarks from the files in ``src``; everything else of vllm as a stub."""

    def __init__(self, src: Path) -> None:
        self.src = src

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "vllm" and not name.startswith("vllm."):
            return None
        rel = name.replace(".", "/")
        for cand in (self.src / rel / "__init__.py", self.src / f"{rel}.py"):
            if name in REAL and cand.is_file():
                package = [str(cand.parent)] if cand.name == "__init__.py" else None
                return importlib.util.spec_from_file_location(name, cand, submodule_search_locations=package)
        return importlib.util.spec_from_loader(name, loader=StubLoader(), is_package=True)  # type: ignore[arg-type]


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/vllm/src")
    sys.meta_path.insert(0, Finder(src))  # type: ignore[arg-type]
    sys.modules["pybase64"] = Stub("pybase64")
    serve = importlib.import_module("vllm.benchmarks.serve")
    parser = argparse.ArgumentParser(prog="vllm bench serve", allow_abbrev=True)
    serve.add_cli_args(parser)
    flags = []
    for a in parser._actions:
        if not a.option_strings or "-h" in a.option_strings:
            continue
        default = a.default
        try:
            json.dumps(default)
        except TypeError:
            default = repr(default)
        group = next((g.title for g in parser._action_groups if a in g._group_actions), None)
        flags.append({"flags": a.option_strings, "dest": a.dest, "action": type(a).__name__,
                      "type": getattr(a.type, "__name__", None) if a.type else None, "nargs": a.nargs,
                      "default": default, "choices": list(a.choices) if a.choices else None,
                      "help": (a.help or "").strip()[:400], "group": group})  # fmt: skip
    source = ("vllm 0.33.0 (its wheel): vllm/benchmarks/serve.py add_cli_args with vllm/benchmarks/datasets/"
              "datasets.py add_dataset_parser, read by benchmarks/extract_vllm_bench_flags.py")
    print(json.dumps({"source": source, "flags": flags}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
