"""Reading the user's files safely: every problem is one ``UserError`` naming the file.

``read_text`` (missing, a folder, too big, not UTF-8), ``load_yaml`` (syntax, alias bombs: alias
references and the expanded size are bounded), ``load_json`` (syntax, nesting too deep),
``prepare_out_dir`` (an --out-dir that is a file or cannot be created). Importing this module also
raises the csv module's field limit to ``csv_field_bytes`` (the default of 128 KiB is below a long
prompt in a manifest). Bounds come from ``lmmbench.config.limits``.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from lmmbench.config.limits import check_limit, limit_value
from lmmbench.core.errors import UserError

__all__ = ["check_output_file", "check_writable_dir", "load_json", "load_yaml", "prepare_out_dir",
           "raise_csv_field_limit", "read_text"]


def raise_csv_field_limit() -> None:
    """Let the csv module read fields up to the ``csv_field_bytes`` bound."""
    csv.field_size_limit(limit_value("csv_field_bytes"))


try:  # at import; a bad LMMBENCH_LIMIT_CSV_FIELD_BYTES is reported by the command, inside the error boundary
    raise_csv_field_limit()
except UserError:
    csv.field_size_limit(64 * 1024**2)


def read_text(path: Path, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (a leading BOM dropped); one clear error for every way it can fail."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{what} not found: {path}")
    if path.is_dir():
        raise UserError(f"{path}: is a folder; expected a {what}")
    try:
        size = path.stat().st_size
        check_limit("file_bytes", size, f"{path}: size in bytes")
        data = path.read_bytes()
    except PermissionError:
        raise UserError(f"{path}: permission denied; cannot read the {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            f"save the {what} as UTF-8"
        ) from None


class _BoundedLoader(yaml.SafeLoader):
    """``SafeLoader`` that counts alias references, so an alias bomb fails early."""

    aliases_seen = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > limit_value("yaml_aliases"):
                raise UserError(
                    f"more than {limit_value('yaml_aliases')} YAML alias references (*name): an alias bomb? "
                    f"(raise with LMMBENCH_LIMIT_YAML_ALIASES)"
                )
        return super().compose_node(parent, index)


def _expanded_size(root: Any, bound: int) -> int:
    """Nodes of ``root`` once every shared reference is expanded (stops counting past ``bound``)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        obj, children_done = stack.pop()
        if not isinstance(obj, (dict, list)) or id(obj) in sizes:
            continue
        kids = list(obj.values()) if isinstance(obj, dict) else obj
        if not children_done:
            stack.append((obj, True))
            stack.extend((k, False) for k in kids if isinstance(k, (dict, list)) and id(k) not in sizes)
            continue
        sizes[id(obj)] = min(bound + 1, 1 + sum(sizes.get(id(k), 1) for k in kids))
    return sizes.get(id(root), 1)


def _flow_depth(text: str) -> int:
    """Deepest nesting of ``[`` / ``{`` in ``text`` (quotes ignored: an upper bound, linear time)."""
    depth = deepest = 0
    for ch in _NOT_BRACKET.sub("", text):
        depth = depth + 1 if ch in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def load_yaml(text: str, source: str | Path,
              tags: Mapping[str, Callable[[yaml.SafeLoader, yaml.Node], Any]] | None = None) -> Any:
    """Parse YAML ``text`` safely: syntax errors, alias bombs and too-deep nesting are ``UserError``.

    ``tags`` adds constructors for custom tags (lm-eval's ``!function``) to the bounded safe loader.
    """
    if _flow_depth(text) > limit_value("yaml_depth"):  # PyYAML's scanner is quadratic in the depth
        raise UserError(f"{source}: YAML nested deeper than {limit_value('yaml_depth')} levels "
                        f"(raise with LMMBENCH_LIMIT_YAML_DEPTH if it is real)")
    loader_cls: type[_BoundedLoader] = _BoundedLoader
    if tags:
        loader_cls = type("_TaggedBoundedLoader", (_BoundedLoader,), {})
        for tag, construct in tags.items():
            loader_cls.add_constructor(tag, construct)
    loader = loader_cls(text)
    try:
        data = loader.get_single_data()
    except UserError as exc:
        raise UserError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else str(source)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: not valid YAML ({problem}); fix the syntax") from None
    except RecursionError:
        raise UserError(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()
    bound = limit_value("yaml_nodes")
    if _expanded_size(data, bound) > bound:
        raise UserError(
            f"{source}: the YAML expands to more than {bound} nodes (aliases referencing aliases?); "
            f"raise with LMMBENCH_LIMIT_YAML_NODES if it is real"
        )
    return data


def load_json(text: str, source: str | Path) -> Any:
    """Parse JSON ``text``: syntax errors and too-deep nesting are one ``UserError`` naming ``source``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise UserError(f"{source}: JSON nested too deeply") from None


def prepare_out_dir(path: Path, what: str = "--out-dir") -> Path:
    """Create the folder ``path`` (and parents); a file in the way or no permission is a ``UserError``."""
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{what} {path}: {parent} is a file, not a folder; choose another {what}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot create the folder ({exc.strerror or exc})") from None
    return path


def check_output_file(path: Path, what: str) -> Path:
    """A file lmmbench will write at ``path``: not a folder, its folder created (``prepare_out_dir``); checked before
    anything runs rather than when the file is written."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path}: is a folder; name a file (e.g. {path / 'metrics.json'})")
    prepare_out_dir(path.parent, what)
    return path


def check_writable_dir(path: Path, what: str) -> Path:
    """``prepare_out_dir``, then a file created and removed in it: a folder lmmbench cannot write is found before
    anything is measured, not after."""
    import tempfile

    path = prepare_out_dir(path, what)
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".lmmbench-write-check-"):
            pass
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot write there ({exc.strerror or exc}); choose another {what}") from None
    return path
