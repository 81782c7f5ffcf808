"""Carrying pairs over to a newer release without reading it, on both backends: only pairs whose places came from
the changelog's base release and hold none of its removed ids move; they keep their places, are fresh again and
have nothing held; every other pair is left as it was, to be read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from store_helpers import (
    NOW,
    imports_table,
    place_ids,
    places_table,
    query,
    reserve_pairs,
    run_for,
    store_at_version,
)

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import REQUESTED

OLD, BASE, NEW = "2026-09-17.0", "2026-10-15.0", "2026-11-18.0"
CELL, OTHER = "cell:53.5,-2", "cell:53.5,-1.5"
READ_AT = NOW - timedelta(days=36)


def _places(area: str, category: str, ids: range, prefix: str = "p") -> list[dict]:
    return [{"id": f"{prefix}{i}", "area": area, "category": category, "lat": 53.7, "lng": -1.6} for i in ids]


def _releases_of_places(store) -> dict[tuple[str, str], set[str]]:
    rows = query(store, "SELECT area, category, release FROM places")
    releases: dict[tuple[str, str], set[str]] = {}
    for area, category, release in rows:
        releases.setdefault((area, category), set()).add(release)
    return releases


def test_pairs_read_from_the_base_release_move_to_the_new_one_as_they_are(store):
    # Cafes with places, pubs with none: "no pubs here" is carried over as well as the cafes are.
    run = run_for([(CELL, "cafe"), (CELL, "pub")])
    store.write_import(run, BASE, places_table(_places(CELL, "cafe", range(5))), READ_AT)
    before = datetime.now(UTC)

    written = store.carry_over(run.pairs, NEW, BASE, removed=["elsewhere"])

    assert written.rows == {(CELL, "cafe"): 5, (CELL, "pub"): 0}
    assert written.replaced_marks == {}
    table = imports_table(store)
    assert {pair: table[pair][:2] for pair in run.pairs} == {(CELL, "cafe"): (NEW, 5), (CELL, "pub"): (NEW, 0)}
    assert all(table[pair][2] >= before for pair in run.pairs)
    assert place_ids(store, CELL, "cafe") == {f"p{i}" for i in range(5)}
    assert _releases_of_places(store) == {(CELL, "cafe"): {NEW}}
    assert query(store, "SELECT DISTINCT places_release FROM place_imports") == [(NEW,)]


def test_pairs_the_changelog_cannot_vouch_for_are_left_to_be_read(store):
    read_from_base = run_for([(CELL, "cafe"), (CELL, "bakery")])
    store.write_import(
        read_from_base,
        BASE,
        places_table(_places(CELL, "cafe", range(5)) + _places(CELL, "bakery", range(3), prefix="b")),
        READ_AT,
    )
    # Read from the release before the base: a change in between is in no changelog at hand.
    store.write_import(run_for([(OTHER, "cafe")]), OLD, places_table(_places(OTHER, "cafe", range(2), "o")), READ_AT)
    # Asked for but never read: nothing to carry.
    reserve_pairs(store, {OTHER: ["pub"]}, READ_AT, READ_AT)
    pairs = [(CELL, "cafe"), (CELL, "bakery"), (OTHER, "cafe"), (OTHER, "pub")]

    # Bakery b1 is gone from the new release.
    written = store.carry_over(pairs, NEW, BASE, removed=["b1", "elsewhere"])

    assert written.rows == {(CELL, "cafe"): 5}
    table = imports_table(store)
    assert table[(CELL, "bakery")] == (BASE, 3, READ_AT)
    assert table[(OTHER, "cafe")] == (OLD, 2, READ_AT)
    assert table[(OTHER, "pub")][0] == REQUESTED
    assert _releases_of_places(store) == {(CELL, "cafe"): {NEW}, (CELL, "bakery"): {BASE}, (OTHER, "cafe"): {OLD}}
    assert [(r.release, r.pairs, r.carried, r.held) for r in store.release_pairs()] == [
        (NEW, 1, 1, 0),
        (BASE, 1, 0, 0),
        (OLD, 1, 0, 0),
    ]


def test_a_pair_on_its_way_is_carried_and_a_mark_of_another_import_is_reported_replaced(store):
    run = run_for([(CELL, "cafe"), (CELL, "pub")])
    store.write_import(run, BASE, places_table(_places(CELL, "cafe", range(4))), READ_AT)
    ours, theirs = NOW - timedelta(minutes=5), NOW - timedelta(minutes=4)
    assert store.force_request([(CELL, "cafe")], ours) == ours
    assert store.force_request([(CELL, "pub")], theirs) == theirs

    written = store.carry_over(run.pairs, NEW, BASE, removed=[], now=NOW, stamp=ours)

    assert written.rows == {(CELL, "cafe"): 4, (CELL, "pub"): 0}
    assert written.replaced_marks == {(CELL, "pub"): theirs}
    assert {pair: imports_table(store)[pair][:2] for pair in run.pairs} == {
        (CELL, "cafe"): (NEW, 4),
        (CELL, "pub"): (NEW, 0),
    }


def test_a_failed_read_keeps_the_release_its_places_came_from(store):
    run = run_for([(CELL, "cafe")])
    store.write_import(run, BASE, places_table(_places(CELL, "cafe", range(3))), READ_AT)
    store.force_request(run.pairs, NOW - timedelta(hours=1))
    assert store.mark_failed(run.pairs, NOW - timedelta(hours=1), NOW, "the release's files were unreadable") == 1

    assert store.carry_over(run.pairs, NEW, BASE, removed=[]).rows == {(CELL, "cafe"): 3}
    assert imports_table(store)[(CELL, "cafe")][:2] == (NEW, 3)
    assert store.import_rows([CELL], ["cafe"])[0].failure is None


def test_a_store_of_the_version_before_keeps_the_release_its_pairs_places_came_from(database_url):
    store = store_at_version(database_url, 16)
    loaded, marked, empty_mark = run_for([(CELL, "cafe")]), run_for([(CELL, "pub")]), run_for([(CELL, "bar")])
    query(
        store,
        "INSERT INTO place_imports (area, category, release, rows, imported_at) VALUES "
        "($cell, 'cafe', $base, 1, $at), ($cell, 'pub', $requested, 0, $now), ($cell, 'bar', $requested, 0, $now) "
        "RETURNING area",
        cell=CELL,
        base=BASE,
        requested=REQUESTED,
        at=READ_AT,
        now=NOW,
    )
    query(
        store,
        "INSERT INTO places (area, category, id, lat, lng, release) VALUES ($cell, 'cafe', 'c', 53.7, -1.6, $base), "
        "($cell, 'pub', 'p', 53.7, -1.6, $base) RETURNING id",
        cell=CELL,
        base=BASE,
    )
    store.migrate()

    pairs = [*loaded.pairs, *marked.pairs, *empty_mark.pairs]
    # The mark of a pair without places cannot say where its (no) places came from: it is read.
    assert store.carry_over(pairs, NEW, BASE, removed=[]).rows == {(CELL, "cafe"): 1, (CELL, "pub"): 1}


def test_a_release_that_is_not_a_release_name_is_refused(store):
    with pytest.raises(InvalidInput, match="use an Overture release name"):
        store.carry_over([(CELL, "cafe")], REQUESTED, BASE, removed=[])
