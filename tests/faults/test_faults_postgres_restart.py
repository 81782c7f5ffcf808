"""PostgreSQL restarts in the middle of a sensor tick: the tick fails visibly, leaves no mark, the next one works.
PostgreSQL stopped while an import runs: the import tries again in the same run and lands, nothing marked failed."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from fault_helpers import backends_waiting, execute, failure_text, marks, request_pairs, tick, wait_until

from nakodo_dagster.jobs import STEP_RETRY_SECONDS
from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.placement import FRESH_DAYS, Cutoffs, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Store, store_unreachable

pytestmark = pytest.mark.faults

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe",))
OLD_RELEASE = "2026-09-10.0"


def _leeds_on(private_postgres, release_root: str) -> tuple[dict, Store]:
    """The sensors' resources over the private server, and its store with the Leeds campaign."""
    resources = {
        "store": StoreResource(database=private_postgres.url),
        "overture": OvertureResource(root=release_root),
    }
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    return resources, store


def test_a_restart_during_a_tick_fails_it_and_leaves_no_mark(instance, private_postgres, release_root):
    resources, store = _leeds_on(private_postgres, release_root)
    [area] = areas_for(LEEDS)
    # A stale import of the pair: the tick's reservation must overwrite this row.
    [stale] = import_runs({area: ["cafe"]}, areas_for(LEEDS))
    store.write_import(
        stale, OLD_RELEASE, PLACES_SCHEMA.empty_table(), datetime.now(UTC) - timedelta(days=FRESH_DAYS + 1)
    )
    # Holding the row keeps the tick inside its reservation, where the restart hits it.
    holder = psycopg2.connect(private_postgres.url)
    holder.cursor().execute("SELECT 1 FROM place_imports FOR UPDATE")
    outcome: list[BaseException | object] = []

    def evaluate() -> None:
        try:
            outcome.append(tick(instance, resources))
        except BaseException as exc:
            outcome.append(exc)

    ticking = threading.Thread(target=evaluate)
    ticking.start()
    watcher = psycopg2.connect(private_postgres.url)
    watcher.autocommit = True

    wait_until(lambda: len(backends_waiting(watcher, "INSERT INTO place_imports")) == 1, "the tick reserving")
    private_postgres.restart()
    ticking.join(timeout=60)

    [failure] = outcome
    # The driver reports the cut connection (rolling back on a closed one says "already closed", the cause kept).
    assert isinstance(failure, psycopg2.Error), failure
    assert "terminating connection" in str(failure.__context__ or failure) or "closed" in str(failure)
    assert marks(store, LEEDS) == [], "no orphan mark"
    [row] = store.import_rows([area], ["cafe"])
    assert row.release == OLD_RELEASE
    [request] = tick(instance, resources).run_requests
    assert request_pairs(request) == [(area, "cafe")]
    assert [(a, c) for a, c, _ in marks(store, LEEDS)] == [(area, "cafe")]


def test_an_import_that_meets_the_store_stopped_tries_again_and_lands(instance, private_postgres, release_root):
    resources, store = _leeds_on(private_postgres, release_root)
    [request] = tick(instance, resources).run_requests
    # Stopped as a crash stops it, for less than a retry's pause: the step's first try meets nothing answering.
    private_postgres.halt()
    restart = threading.Timer(STEP_RETRY_SECONDS / 2, private_postgres.start)
    restart.start()
    started = time.monotonic()
    try:
        result = execute(instance, resources, request)
    finally:
        restart.join()

    assert result.success, failure_text(result)
    assert time.monotonic() - started >= STEP_RETRY_SECONDS, "the step ran again after its pause"
    [row] = store.import_rows(*zip(*request_pairs(request), strict=True))
    assert row.failure is None and Cutoffs.at(datetime.now(UTC)).row_state(row) == "fresh"
    assert "The store could not be reached" in "".join(
        record.event_log_entry.user_message for record in instance.get_records_for_run(result.run_id).records
    )


def test_only_a_store_out_of_reach_counts_as_an_outage(private_postgres, pg_admin_url):
    with (
        pytest.raises(psycopg2.OperationalError) as cancelled,
        psycopg2.connect(pg_admin_url) as connection,
        connection.cursor() as cursor,
    ):
        cursor.execute("SET statement_timeout = 10; SELECT pg_sleep(1)")
    assert not store_unreachable(cancelled.value), "a query cancelled is an answer of the server"
    private_postgres.halt()
    try:
        with pytest.raises(psycopg2.OperationalError) as refused:
            psycopg2.connect(private_postgres.url)
    finally:
        private_postgres.start()
    assert store_unreachable(refused.value)
    # Wrapped on its way up, as DuckDB and Dagster wrap what they meet: the cause is what counts.
    wrapped = RuntimeError("the write failed")
    wrapped.__cause__ = refused.value
    assert store_unreachable(wrapped)
    assert not store_unreachable(RuntimeError("the write failed"))
