"""A pytest plugin for the device runs (``-p _pytest_instafail`` with ``benchmarks/`` on the path): each failure's
report is written the moment the test fails, not in the summary at the end, so a suite cut off
by its time cap still leaves every failure it reached in the log."""

from __future__ import annotations

import pytest

MAX_CHARS = 6000  # the report's tail: the assertion and the frames nearest to it


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.failed:
        return
    text = report.longreprtext
    if len(text) > MAX_CHARS:
        text = "...\n" + text[-MAX_CHARS:]
    print(f"\n__ FAILED {report.nodeid} ({report.when}) __\n{text}\n__ end of {report.nodeid} __", flush=True)
