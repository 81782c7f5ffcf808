"""A suite that cannot hang: the hard stop behind pytest-timeout's time limit.

A test past its time limit (pytest-timeout's `timeout`, or its own `timeout` mark) fails with every thread's stack
and the suite goes on. A test stuck in native code (a DuckDB connection collected while its worker thread still
scanned) never returns to Python to hear that; ``hard_stop_grace`` seconds after the limit, faulthandler's own
thread, which needs no Python, prints every thread's stack to the terminal and ends the suite, so that a hang costs
CI minutes, not its whole budget.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator

import pytest

_terminal: int | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "hard_stop_grace",
        "Seconds past a test's time limit after which a test that did not stop ends the suite with every stack",
        default="60",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _terminal
    # The terminal's stderr, taken before pytest captures the tests' output.
    _terminal = os.dup(sys.stderr.fileno())


def pytest_unconfigure(config: pytest.Config) -> None:
    global _terminal
    if _terminal is not None:
        os.close(_terminal)
        _terminal = None


def time_limit(item: pytest.Item) -> float:
    """The test's time limit in seconds as pytest-timeout reads it: its mark, else the suite's (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    limit = time_limit(item)
    if limit and _terminal is not None:
        grace = float(item.config.getini("hard_stop_grace"))
        faulthandler.dump_traceback_later(limit + grace, exit=True, file=_terminal)
    try:
        return (yield)
    finally:
        if limit:
            faulthandler.cancel_dump_traceback_later()
