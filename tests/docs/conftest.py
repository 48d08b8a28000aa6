"""The docs leg's own closing count: blocks run, skipped by their marker, failed (beside pytest's line)."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    def blocks(kind: str) -> int:
        reports = terminalreporter.stats.get(kind, [])
        return sum(1 for r in reports if "test_block_runs_as_pasted" in getattr(r, "nodeid", "")
                   and getattr(r, "when", "") in ("call", "setup"))  # fmt: skip

    ran, skipped, failed = blocks("passed"), blocks("skipped"), blocks("failed") + blocks("error")
    if ran or skipped or failed:
        terminalreporter.write_line(f"docs test: {ran + failed} blocks run ({failed} failed), "
                                    f"{skipped} skipped by their marker")
