"""A failed import is recorded as what it is: its own time and its reason. It reads as failed at once, every time
shown is true, and its block lasts exactly the week after the failure; campaigns count its areas failed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_helpers import (
    NOW,
    needs_of,
    query,
    record_release,
    schema_version,
    store_at_version,
    writing_before_version_13,
)

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import RETRY_DAYS, PointLocation, Targeting, areas_for
from nakodo_dagster.store import Store
from nakodo_dagster.store.schema import MIGRATIONS

# A 2 km circle at a cell's centre: one area.
LEEDS = Targeting((PointLocation(53.75, -1.75, 2),), ("cafe",))
(CELL,) = areas_for(LEEDS)
PAIR = (CELL, "cafe")
REASON = "Overture release 2026-11-18.0: file part-00003.parquet is unreadable (truncated or not Parquet)"
MINUTE = timedelta(minutes=1)


def _failed_at(store: Store, minutes: int) -> tuple:
    """A campaign's pair reserved at NOW and its import failed ``minutes`` later; returns (stamp, failure time)."""
    store.add_campaign("Leeds", LEEDS, now=NOW)
    reservation = store.reserve_missing(NOW, 1)
    assert [run.pairs for run in reservation.runs] == [(PAIR,)]
    failed_at = NOW + minutes * MINUTE
    assert store.mark_failed([PAIR], NOW, failed_at, REASON) == 1
    return reservation.stamp, failed_at


def test_a_failure_keeps_its_own_time_and_reason_and_reads_failed_at_once(store):
    _, failed_at = _failed_at(store, 20)
    just_after = failed_at + timedelta(seconds=1)

    [row] = store.import_rows([CELL], ["cafe"])
    assert (row.imported_at, row.failure) == (failed_at, REASON)
    coverage = store.coverage(just_after, listed=5)
    assert coverage.counts["failed"] == 1 and coverage.counts["coming"] == 0
    [listed] = [pair for pair in coverage.listed if pair.state == "failed"]
    assert (listed.imported_at, listed.failure) == (failed_at, REASON)
    assert needs_of(store, just_after).coming == set(), "nobody waits on a pair known to have failed"
    [progress] = store.search_progress(just_after)
    assert (progress.failed, progress.coming, progress.missing, progress.pending(True)) == (1, 0, 0, 0)
    [status] = store.import_status(just_after)
    assert (status.failed, status.coming) == (1, 0)


def test_a_failed_pair_is_left_alone_for_exactly_the_week_after_its_failure(store):
    _, failed_at = _failed_at(store, 20)
    end = failed_at + timedelta(days=RETRY_DAYS)

    # Six hours before the week is over (where the dated-back block ended) it is still left alone.
    assert store.reserve_missing(end - timedelta(hours=6), 5).runs == []
    assert store.reserve_missing(end - timedelta(microseconds=1), 5).runs == []
    assert store.coverage(end - timedelta(microseconds=1), listed=0).counts["failed"] == 1
    again = store.reserve_missing(end, 5)
    assert [run.pairs for run in again.runs] == [(PAIR,)]
    [row] = store.import_rows([CELL], ["cafe"])
    assert (row.imported_at, row.failure) == (end, None), "asked for again: a new mark, on its way"


def test_only_the_runs_own_marks_fail_and_only_once(store):
    stamp, failed_at = _failed_at(store, 20)
    assert store.mark_failed([PAIR], stamp, failed_at + MINUTE, "again") == 0
    assert store.mark_failed([PAIR], NOW - MINUTE, failed_at + MINUTE, "another run's stamp") == 0
    [row] = store.import_rows([CELL], ["cafe"])
    assert (row.imported_at, row.failure) == (failed_at, REASON)


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_a_failure_needs_a_reason_and_writes_nothing_without_one(store, reason):
    store.add_campaign("Leeds", LEEDS, now=NOW)
    store.reserve_missing(NOW, 1)
    with pytest.raises(InvalidInput, match="reason"):
        store.mark_failed([PAIR], NOW, NOW + MINUTE, reason)
    [row] = store.import_rows([CELL], ["cafe"])
    assert (row.imported_at, row.failure) == (NOW, None)


def test_a_failed_pair_can_be_retried_at_once_and_a_landing_clears_its_failure(store):
    _, failed_at = _failed_at(store, 20)
    forgotten = store.forget_failed_import(CELL, "cafe", failed_at + MINUTE)
    assert (forgotten.imported_at, forgotten.failure) == (failed_at, REASON)
    assert store.import_rows([CELL], ["cafe"]) == []

    store.reserve_missing(failed_at + 2 * MINUTE, 1)
    assert store.mark_failed([PAIR], failed_at + 2 * MINUTE, failed_at + 3 * MINUTE, REASON) == 1
    record_release(store, [PAIR], failed_at + 4 * MINUTE)
    [row] = store.import_rows([CELL], ["cafe"])
    assert (row.release, row.imported_at, row.failure) == ("2026-11-18.0", failed_at + 4 * MINUTE, None)
    [progress] = store.search_progress(failed_at + 5 * MINUTE)
    assert (progress.failed, progress.arrived_at) == (0, failed_at + 4 * MINUTE)


def test_a_store_of_the_version_before_upgrades_and_keeps_its_marks(database_url):
    store = store_at_version(database_url, 6)
    assert schema_version(store) == 6
    with writing_before_version_13():
        store.add_campaign("Leeds", LEEDS, now=NOW)
    # A mark failed before version 7 was dated back 6 hours: it reads as a lost import, failed, as it did.
    query(
        store,
        "INSERT INTO place_imports VALUES ($area, 'cafe', 'requested', 0, $at) RETURNING area",
        area=CELL,
        at=NOW - timedelta(hours=6),
    )
    store.migrate()
    assert schema_version(store) == MIGRATIONS[-1][0]
    [row] = store.import_rows([CELL], ["cafe"])
    assert (row.imported_at, row.failure) == (NOW - timedelta(hours=6), None)
    assert store.coverage(NOW, listed=0).counts["failed"] == 1
