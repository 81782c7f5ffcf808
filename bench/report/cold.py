"""The cold onboarding part's section of results.md. Its lines live in bench.cold, which prints them itself when run
alone (``python -m bench.cold``)."""

from __future__ import annotations

from bench.cold import cold_lines
from bench.report.common import measured_when


def sections(results: dict, summary: dict) -> list[str]:
    if "cold" not in results:
        return []
    return cold_lines(results["cold"], measured_when(results, "cold"))
