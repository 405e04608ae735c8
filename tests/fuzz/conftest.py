"""The fuzz suite's figures: a table at the end of the run, and JSON when asked for."""

from __future__ import annotations

import pytest

from tests.support.fuzz_harness import FIGURES, report_path, summary_lines, write_report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    terminalreporter.section("fuzz figures")
    for line in summary_lines():
        terminalreporter.write_line(line)
    path = report_path()
    if path:
        write_report(path)
