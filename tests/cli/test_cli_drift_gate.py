"""Held pairs from the command line, as a user runs it: `imports status` lists them with their numbers, `imports
accept` lands one, and bad input is one clear error, exit 2, with nothing written."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from store_helpers import count_places

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.placement import PointLocation, Targeting, import_runs
from nakodo_dagster.store import ReleasePairs, open_store

CELL = "cell:53.5,-2"
OLD, NEW = "2026-10-15.0", "2026-11-18.0"


def _places(category: str, count: int) -> pa.Table:
    rows = [
        {"id": f"{category}-{i}", "area": CELL, "category": category, "lat": 53.7, "lng": -1.6, "confidence": 0.8}
        for i in range(count)
    ]
    return pa.Table.from_pylist(rows, schema=PLACES_SCHEMA)


def _hold(database_url: str) -> None:
    """Pubs: 40 in the old release, 4 in the new one, held at the gate."""
    store = open_store(database_url)
    store.migrate()
    (run,) = import_runs({CELL: ["pub"]}, {})
    store.write_import(run, OLD, _places("pub", 40), datetime.now(UTC) - timedelta(days=40))
    store.write_import(run, NEW, _places("pub", 4), gate=DriftLimits())


def test_status_lists_held_pairs_and_accept_lands_one(nakodo, database_url):
    _hold(database_url)

    status = nakodo("imports", "status").stdout
    assert "Held at the drift gate (1 pair)" in status
    (line,) = [line for line in status.splitlines() if line.startswith("pub ") and "accept" in line]
    assert re.match(
        rf"pub +{re.escape(CELL)} +{OLD}: 40 +{NEW}: 4 +-90% +10% +0.80 -> 0.80 +\[1\] .* nakodo imports accept "
        rf"{re.escape(CELL)} pub$",
        line,
    ), line
    assert "[1] count changed by -90% (40 -> 4), beyond 50%; 10% of the places kept by id, under 50%" in status
    # The new release has reached no pair yet: its one pair is held, and keeps the old release's places.
    releases = status[status.index("Releases, newest first") :].splitlines()[1:4]
    assert [line.split() for line in releases] == [
        ["release", "pairs", "read", "carried", "over", "held"],
        [NEW, "0", "0", "0", "1"],
        [OLD, "1", "1", "0", "0"],
    ]

    accepted = nakodo("imports", "accept", CELL, "pub").stdout
    assert accepted.startswith(f"Accepted release {NEW} for pub in {CELL}: its 4 places replace release {OLD}'s 40")
    store = open_store(database_url)
    assert count_places(store, [(CELL, "pub")]) == {(CELL, "pub"): 4}
    assert store.held_imports() == []
    assert store.release_pairs() == [ReleasePairs(NEW, 1, 0, 0)]
    assert "Held at the drift gate" not in nakodo("imports", "status").stdout


def test_bad_input_is_one_error_and_writes_nothing(nakodo_here, database_url, written):
    _hold(database_url)
    before = written()
    for args, message in (
        (["cell:53.3,-2", "pub"], "cell:53.3,-2"),
        (["cell:53.5,-2", "Pubs!"], "Pubs!"),
        (["cell:53.5,-2", "cafe"], "nothing is held for cafe in cell:53.5,-2"),
        (["cell:53.5,-2"], "Missing argument 'CATEGORY'"),
    ):
        done = nakodo_here("imports", "accept", *args, expect=2)
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and message in errors[0], done.stderr
        assert done.stdout == ""
    assert written() == before
    (held,) = open_store(database_url).held_imports()
    assert (held.area, held.category, held.drift.after) == (CELL, "pub", 4)


def test_accepting_marks_the_businesses_the_new_release_no_longer_lists(nakodo, database_url):
    _hold(database_url)
    store = open_store(database_url)
    # A campaign that searched while the pair held the old release's 40 pubs.
    campaign = store.add_campaign("Leeds pubs", Targeting((PointLocation(53.7, -1.6, 5),), ("pub",)))
    store.add_campaign_businesses(campaign, datetime.now(UTC))
    assert len(store.campaign_results(campaign)) == 40

    nakodo("imports", "accept", CELL, "pub")
    store.add_campaign_businesses(campaign, datetime.now(UTC) + timedelta(minutes=2))

    table = nakodo("results", str(campaign), "--format", "csv").stdout
    rows = list(csv.DictReader(io.StringIO(table)))
    assert table.splitlines()[0].endswith(",country,removed_in,closed_in")
    assert {row["id"]: row["removed_in"] for row in rows} == {f"pub-{i}": "" if i < 4 else NEW for i in range(40)}
