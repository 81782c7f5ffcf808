"""PostgreSQL restarts in the middle of a sensor tick: the tick fails visibly, leaves no mark, the next one works."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from fault_helpers import backends_waiting, marks, request_pairs, tick, wait_until

from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.placement import FRESH_DAYS, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.resources import OvertureResource, StoreResource

pytestmark = pytest.mark.faults

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe",))
OLD_RELEASE = "2026-09-10.0"


def test_a_restart_during_a_tick_fails_it_and_leaves_no_mark(instance, private_postgres, release_root):
    resources = {
        "store": StoreResource(database=private_postgres.url),
        "overture": OvertureResource(root=release_root),
    }
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
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
