"""The soak part's section of results.md. Its lines and targets live in bench.soak, which prints them itself when
run alone (``python -m bench.soak``)."""

from __future__ import annotations

from bench.report.common import measured_when
from bench.soak import soak_lines


def sections(results: dict, summary: dict) -> list[str]:
    if "soak" not in results:
        return []
    return soak_lines(results["soak"], measured_when(results, "soak"))
