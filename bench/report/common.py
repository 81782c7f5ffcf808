"""What several parts' summaries and lines share: how a figure is written, when a section was measured, a reader's
medians and a row of the glance."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import NamedTuple

BACKEND_NAMES = {"duckdb": "DuckDB", "postgres": "PostgreSQL"}


class GlanceRow(NamedTuple):
    """One target of the issue beside its figure, a row of the table at the top of results.md."""

    figure: str
    measured: str
    target: str
    met: bool


def duration(value: float) -> str:
    """Seconds as milliseconds under one second, else as seconds."""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def megabytes(value: float) -> str:
    return f"{value / 1e6:,.2f} MB"


def measured_when(results: dict, section: str) -> str:
    """When a section was measured; a results.json written before sections carried their own date has one."""
    return results.get("measured_at", {}).get(section, results["when"])


def median_of(samples: list[dict], key: str) -> float:
    return float(statistics.median(sample[key] for sample in samples))


def reader_medians(case: dict, readers: Iterable[str]) -> dict[str, dict[str, float]]:
    """Each reader's medians over a case's samples; CPU time where the samples have it (earlier runs did not)."""
    keys = ("seconds", "requests", "bytes", "peak_mb", "rows", "cpu_seconds")
    return {
        reader: {key: median_of(case[reader], key) for key in keys if all(key in sample for sample in case[reader])}
        for reader in readers
    }
