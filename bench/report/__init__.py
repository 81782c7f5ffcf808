"""bench/results.md (a table a person reads) and bench/results.json (every figure, ratios and targets), each bench
part's figures summarised and written by that part's module here; the glance at the top gathers their targets."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import changelog, cold, daemon, faults, fleet, overture, policy, readers, search, soak
from bench.report.common import GlanceRow, verdict

# The summary's keys and the glance's rows keep the order results.json and results.md have always had, which is not
# the parts' order: the sensors' ticks come first.
SUMMARIES = (
    readers.summarise,
    policy.summarise_ticks,
    overture.summarise,
    search.summarise,
    policy.summarise_search_runs,
    daemon.summarise,
)
GLANCES = (policy.glance_rows, overture.glance_rows, search.glance_rows, daemon.glance_rows)
# Each part's sections, in the order of bench's PARTS.
SECTIONS = (
    readers.sections,
    overture.sections,
    search.sections,
    policy.sections,
    daemon.sections,
    fleet.sections,
    soak.sections,
    cold.sections,
    faults.sections,
    changelog.sections,
)


def summarise(results: dict) -> dict:
    """Medians per case and reader and the ratios the targets are about; each tick, search and rate against its
    target."""
    summary: dict = {}
    for part_summary in SUMMARIES:
        summary |= part_summary(results)
    return summary


def write_results(results: dict, folder: Path) -> None:
    """Write results.json and results.md into ``folder``."""
    results = results | {"summary": summarise(results)}
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    summary = results["summary"]
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {results['when']} ({results['machine']['cpus']} CPUs, "
        f"{results['machine']['platform']}); each section says when it was measured (`python -m bench --only` "
        "measures some parts and keeps the others' figures); every figure is in `results.json`. The machine is "
        "shared with other work: figures that repeat are medians.",
        "",
        *_glance_lines([row for glance in GLANCES for row in glance(results, summary)]),
    ]
    for part_sections in SECTIONS:
        lines += part_sections(results, summary)
    (folder / "results.md").write_text("\n".join(lines))


def _glance_lines(rows: list[GlanceRow]) -> list[str]:
    """Every target of the issue beside its figure."""
    if not rows:
        return []
    return [
        "## Targets at a glance",
        "",
        "| figure | measured | target | |",
        "|---|---:|---|---|",
        *(f"| {row.figure} | {row.measured} | {row.target} | {verdict(row.met)} |" for row in rows),
        "",
    ]
