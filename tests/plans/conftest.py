"""Fixtures of the plan tests: a plan file writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture
def write_plan(tmp_path: Path) -> Any:
    """``write_plan(rows, **plan_fields)`` -> path of a YAML plan under tmp_path."""

    def _write(rows: list[dict[str, Any]], name: str = "p", **fields: Any) -> Path:
        path = tmp_path / f"{name}.yaml"
        data = {"name": name, "out_dir": str(tmp_path / "out"), **fields, "rows": rows}
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return path

    return _write
