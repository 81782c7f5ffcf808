"""Two import daemons tick at the same moment on the same campaigns and store: each pair is reserved and
imported by exactly one of them.

On PostgreSQL the race is forced: a stale row both reservations must overwrite is held until one daemon waits on
it inside its reservation and the other on the coverage count that begins every reservation (a count at a time:
the second then reads the needs the first left). On DuckDB, which admits one writer at a time, the two are
released together and interleave as the file lock lets them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from fault_helpers import backends_waiting, marks, wait_until

from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.placement import FRESH_DAYS, PointLocation, Targeting, areas_for, import_runs

pytestmark = pytest.mark.faults

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 5),), ("cafe", "pub"))
MANCHESTER = Targeting((PointLocation(53.4808, -2.2426, 5),), ("cafe", "bakery"))


def test_two_daemons_racing_import_each_pair_once(database_url, release_root, resources, workers):
    store = resources["store"].store
    for name, targeting in (("Leeds", LEEDS), ("Manchester", MANCHESTER)):
        store.add_campaign(name, targeting)
    wanted = {(area, c) for t in (LEEDS, MANCHESTER) for area in areas_for(t) for c in t.categories}
    daemons = [workers.start("daemon", {"store": database_url, "root": release_root}) for _ in range(2)]

    if database_url.startswith("postgresql://"):
        _race_inside_the_reservation(store, database_url, lambda: workers.go(*daemons))
    else:
        workers.go(*daemons)
    imported = []
    for daemon in daemons:
        out, _ = daemon.communicate(timeout=120)
        assert daemon.returncode == 0, out
        imported.append({tuple(pair) for pair in json.loads(out.strip().splitlines()[-1])})

    first, second = imported
    assert not first & second, "no pair reserved or imported twice"
    assert first | second == wanted, "every pair imported"
    assert marks(store, LEEDS) == marks(store, MANCHESTER) == []
    rows = store.import_rows({area for area, _ in wanted}, {category for _, category in wanted})
    assert {(r.area, r.category) for r in rows} >= wanted and all(r.release != "requested" for r in rows)


def _race_inside_the_reservation(store, url: str, go) -> None:
    """Release the daemons while a stale row they both want is held; let go once one waits on it and the other on
    the count before its reservation."""
    area = sorted(areas_for(LEEDS))[0]
    [stale] = import_runs({area: ["cafe"]}, areas_for(LEEDS))
    store.write_import(
        stale, "2026-09-10.0", PLACES_SCHEMA.empty_table(), datetime.now(UTC) - timedelta(days=FRESH_DAYS + 1)
    )
    holder, watcher = psycopg2.connect(url), psycopg2.connect(url)
    watcher.autocommit = True
    try:
        holder.cursor().execute("SELECT 1 FROM place_imports FOR UPDATE")
        go()
        wait_until(
            lambda: (
                len(backends_waiting(watcher, "INSERT INTO place_imports")) == 1
                and len(backends_waiting(watcher, "UPDATE coverage_counted")) == 1
            ),
            "one daemon reserving, the other waiting for the count before its reservation",
        )
        holder.rollback()
    finally:
        holder.close()
        watcher.close()
