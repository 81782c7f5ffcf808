"""`make bench` as a developer runs it: every part of one invocation in the same process, its report written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Each runs a part of the bench in a process of its own, a soak among them: minutes under load.
pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.timeout(900)]

PROJECT = Path(__file__).parents[1]


def test_the_reader_parts_run_one_after_the_other_in_one_bench(tmp_path):
    # Both parts serve a release from an S3 server on loopback; the second once refused to start because the
    # first one's bucket was still there. Small releases and no added latency: what is tested is the sequence.
    out = tmp_path / "report"
    sizes = ["--rows", "4000", "--overture-rows", "4000", "--repeat", "1", "--overture-repeat", "1"]
    sizes += ["--latency-ms", "0"]
    folders = ["--work", str(tmp_path / "work"), "--out", str(out)]
    command = [sys.executable, "-m", "bench", "--only", "readers,overture", *sizes, *folders]
    finished = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert {"cases", "overture"} <= set(results)
    assert results["overture"]["cases"]["block"]["index"][0]["rows"] > 0
    assert "## Reading at Overture's scale" in (out / "results.md").read_text()


def test_the_soak_ticks_every_sensor_through_every_phase_and_lands_imports(tmp_path):
    # A short soak on DuckDB, as the bench's soak part runs it: what is tested is that every phase happens, the
    # runs land and the searches run, not how long the ticks take.
    command = [sys.executable, "-m", "bench.soak", "--backend", "duckdb", "--campaigns", "30", "--max-rounds", "2"]
    finished = subprocess.run([*command, "--work", str(tmp_path)], cwd=PROJECT, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    soak = json.loads(finished.stdout)
    assert list(soak["phases"]) == [
        "cold start",
        "steady, imports landing",
        "after a burst of new campaigns",
        "next day",
        "new release, 35 days on",
    ]
    assert all(set(sensors) == {"import", "search", "coverage"} for sensors in soak["phases"].values())
    assert soak["imports"]["landed"] > 0 and soak["searches"] > 0
    assert soak["events"]["after a burst of new campaigns"]["added"] > 0
    # Every search and every import write is timed, by phase.
    assert sum(phase["search"]["count"] for phase in soak["work"].values() if "search" in phase) == soak["searches"]
    writes = sum(phase["import write"]["count"] for phase in soak["work"].values() if "import write" in phase)
    assert writes == soak["imports"]["landed"]
    assert "## Soak" in finished.stderr and "| import write |" in finished.stderr


def test_the_changelog_part_reads_a_release_change_both_ways_to_the_same_places(tmp_path):
    out = tmp_path / "report"
    command = [sys.executable, "-m", "bench", "--only", "changelog", "--changelog-rows", "5000"]
    folders = ["--work", str(tmp_path / "work"), "--out", str(out)]
    finished = subprocess.run([*command, *folders], cwd=PROJECT, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    figures = json.loads((out / "results.json").read_text())["changelog"]
    assert figures["same_places"]
    without, with_ = figures["without_changelog"], figures["with_changelog"]
    assert without["runs_reading"] == without["block_runs"] == with_["block_runs"] and without["pairs_carried"] == 0
    assert 0 < with_["pairs_carried"] < with_["pairs"] and with_["runs_reading"] < with_["block_runs"]
    assert "## A new release with its changelog" in (out / "results.md").read_text()
