"""Writing an import: exactly the run's pairs, all at once, zero-row pairs recorded, nothing on failure."""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import UTC, datetime

import duckdb
import psycopg2
import pyarrow as pa
import pytest
from store_helpers import (
    NOW,
    RELEASE,
    count_places,
    imports_table,
    place_ids,
    places_table,
    query,
    record_release,
    run_for,
)

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import REQUESTED
from nakodo_dagster.store import open_store

A, B, C = "cell:53.5,-2", "cell:53.5,-1.5", "cell:53,-2"
OLD_RELEASE = "2026-10-15.0"
NEW_RELEASE = RELEASE


def _place(id_: str, area: str, category: str, **extra) -> dict:
    return {"id": id_, "area": area, "category": category, "name": f"Place {id_}", "lat": 53.8, "lng": -1.6, **extra}


@pytest.fixture
def loaded(store):
    """Old places in (A, cafe) and (C, cafe), and an import of (A, cafe), (A, pub), (B, cafe) asked for."""
    store.write_import(
        run_for([(A, "cafe"), (C, "cafe")]),
        OLD_RELEASE,
        places_table([_place("old1", A, "cafe"), _place("old2", A, "cafe"), _place("c1", C, "cafe")]),
        NOW,
    )
    store.force_request([(A, "cafe"), (A, "pub"), (B, "cafe")], NOW)
    return store


def test_write_import_replaces_exactly_the_runs_pairs(loaded):
    later = NOW.replace(hour=13)
    places = places_table(
        [
            _place("new1", A, "cafe"),
            _place("new2", A, "cafe"),
            _place("b1", B, "cafe"),
            # Pairs the run did not reserve: never written.
            _place("c2", C, "cafe"),
            _place("b2", B, "pub"),
        ]
    )
    written = loaded.write_import(run_for([(A, "cafe"), (A, "pub"), (B, "cafe")]), NEW_RELEASE, places, later)
    assert written.rows == {(A, "cafe"): 2, (A, "pub"): 0, (B, "cafe"): 1}
    assert place_ids(loaded, A, "cafe") == {"new1", "new2"}
    assert place_ids(loaded, B, "cafe") == {"b1"}
    assert place_ids(loaded, C, "cafe") == {"c1"}
    assert place_ids(loaded, B, "pub") == set()
    assert imports_table(loaded) == {
        (A, "cafe"): (NEW_RELEASE, 2, later),
        (A, "pub"): (NEW_RELEASE, 0, later),
        (B, "cafe"): (NEW_RELEASE, 1, later),
        (C, "cafe"): (OLD_RELEASE, 1, NOW),
    }
    assert count_places(loaded, [(A, "cafe"), (A, "pub"), (C, "cafe")]) == {(A, "cafe"): 2, (C, "cafe"): 1}


def test_list_columns_arrive_as_lists_or_as_json_text(store):
    as_lists = places_table([_place("p1", A, "cafe", websites=["https://a.example"], phones=["+44 1", "+44 2"])])
    as_text = as_lists.set_column(
        as_lists.schema.get_field_index("websites"), "websites", pa.array([json.dumps(["https://b.example"])])
    )
    structured = as_lists.set_column(
        as_lists.schema.get_field_index("address"),
        "address",
        pa.array([{"freeform": "1 Briggate", "locality": "Leeds"}]),
    )
    store.write_import(run_for([(A, "cafe")]), RELEASE, as_lists, NOW)
    store.write_import(
        run_for([(B, "cafe")]),
        RELEASE,
        as_text.set_column(as_text.schema.get_field_index("area"), "area", pa.array([B])),
        NOW,
    )
    store.write_import(
        run_for([(C, "cafe")]),
        RELEASE,
        structured.set_column(structured.schema.get_field_index("area"), "area", pa.array([C])),
        NOW,
    )
    rows = {area: rest for area, *rest in query(store, "SELECT area, websites, phones, address FROM places")}
    assert json.loads(rows[A][0]) == ["https://a.example"]
    assert json.loads(rows[A][1]) == ["+44 1", "+44 2"]
    assert json.loads(rows[B][0]) == ["https://b.example"]
    assert json.loads(rows[C][2]) == {"freeform": "1 Briggate", "locality": "Leeds"}


def test_a_failure_half_way_leaves_the_previous_places_and_the_mark(loaded):
    before = imports_table(loaded)
    places = places_table([_place("new1", A, "cafe")])
    # A place without a latitude fails the insert, after the pairs were recorded and their places deleted.
    bad = places.set_column(places.schema.get_field_index("lat"), "lat", pa.array([None], pa.float64()))
    with pytest.raises((duckdb.Error, psycopg2.Error)):
        loaded.write_import(run_for([(A, "cafe"), (A, "pub")]), NEW_RELEASE, bad, NOW.replace(hour=13))
    with pytest.raises((duckdb.Error, psycopg2.Error)):
        loaded.write_import(
            run_for([(A, "cafe")]),
            NEW_RELEASE,
            places.set_column(places.schema.get_field_index("lat"), "lat", pa.array(["north"])),
            NOW,
        )
    assert place_ids(loaded, A, "cafe") == {"old1", "old2"}
    assert imports_table(loaded) == before
    assert before[(A, "pub")] == (REQUESTED, 0, NOW)


@pytest.mark.faults
def test_a_process_killed_mid_write_leaves_the_previous_places_and_the_mark(loaded, database_url, workers):
    before = imports_table(loaded)
    args = {
        "run": run_for([(A, "cafe"), (A, "pub")]).payload(),
        "release": NEW_RELEASE,
        "places": [_place("new1", A, "cafe", confidence=0.9, address=None, country="GB", websites="[]", phones="[]")],
        "now": NOW.replace(hour=13).isoformat(),
    }
    [process] = workers.start("write-and-die", database_url, [args])
    workers.go([process])
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert place_ids(loaded, A, "cafe") == {"old1", "old2"}
    assert imports_table(loaded) == before


def test_bad_input_is_refused_before_anything_is_written(loaded):
    before = imports_table(loaded)
    places = places_table([_place("new1", A, "cafe")])
    with pytest.raises(InvalidInput, match="release"):
        loaded.write_import(run_for([(A, "cafe")]), REQUESTED, places, NOW)
    with pytest.raises(InvalidInput, match=r"lacks columns \['phones'\]"):
        loaded.write_import(run_for([(A, "cafe")]), NEW_RELEASE, places.drop_columns(["phones"]), NOW)
    assert place_ids(loaded, A, "cafe") == {"old1", "old2"}
    assert imports_table(loaded) == before


def test_a_pair_with_no_places_is_a_result(store):
    record_release(store, [(A, "cafe")], NOW)
    assert imports_table(store) == {(A, "cafe"): (RELEASE, 0, NOW)}


@pytest.mark.postgres
def test_two_writers_of_one_pair_take_turns(postgres_url):
    """An analyst re-materialises a pair while the sensor's run writes it: the later write replaces the earlier."""
    store = open_store(postgres_url)
    store.migrate()
    store.force_request([(A, "cafe")], NOW)
    blocker, watcher = psycopg2.connect(postgres_url), psycopg2.connect(postgres_url)
    # The watcher commits after each look: within a transaction pg_stat_activity would stay as first seen.
    watcher.autocommit = True
    blocker.cursor().execute("SELECT 1 FROM place_imports FOR UPDATE")
    writers = [
        threading.Thread(
            target=store.write_import,
            args=(
                run_for([(A, "cafe")]),
                NEW_RELEASE,
                places_table([_place(f"{w}{i}", A, "cafe") for i in range(3)]),
                NOW,
            ),
        )
        for w in ("x", "y")
    ]
    for writer in writers:
        writer.start()
    deadline, waiting = time.monotonic() + 20, 0
    with watcher.cursor() as cursor:
        while waiting < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            [(waiting,)] = cursor.fetchall()
    watcher.close()
    assert waiting == 2, "the writers did not both wait for the pair's row"
    blocker.rollback()
    blocker.close()
    for writer in writers:
        writer.join(30)
    assert place_ids(store, A, "cafe") in ({"x0", "x1", "x2"}, {"y0", "y1", "y2"})
    assert imports_table(store)[(A, "cafe")] == (NEW_RELEASE, 3, NOW)


def test_a_pair_is_dated_when_its_places_become_visible(store):
    """A search that ran while the import was reading must find the import new once it commits."""
    run = run_for([(A, "cafe")])
    read = places_table([_place("p1", A, "cafe")])  # the read finished...
    searched_at = datetime.now(UTC)  # ...a search ran before the write...

    store.write_import(run, RELEASE, read)

    [row] = store.import_rows([A], ["cafe"])
    assert row.release == RELEASE
    assert row.imported_at > searched_at, "the search sensor sees new places landed after that search"
