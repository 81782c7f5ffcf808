"""The drift gate in the store, on both backends: a newer release's rows past the limits are held and the pair keeps
its places; a pass, an accepted re-import or an analyst's acceptance lands them; the numbers are those pyarrow
computes from the same rows."""

from __future__ import annotations

import re
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from store_helpers import (
    NOW,
    imports_table,
    place_ids,
    places_table,
    query,
    reserve_pairs,
    run_for,
    schema_version,
    store_at_version,
    writing_before_version_15,
)

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import FRESH_DAYS, import_needs, parse_area_key
from nakodo_dagster.store.schema import MIGRATIONS

OLD, NEW, NEXT = "2026-10-15.0", "2026-11-18.0", "2026-12-16.0"
CELL = "cell:53.5,-2"
LIMITS = DriftLimits()


def _places(category: str, ids: range, confidence: float = 0.8, prefix: str = "p") -> list[dict]:
    return [
        {"id": f"{prefix}{i}", "area": CELL, "category": category, "lat": 53.7, "lng": -1.6, "confidence": confidence}
        for i in ids
    ]


def _independent(before: pa.Table, after: pa.Table) -> tuple[int, int, int, float, float]:
    """The gate's numbers from the two tables alone: counts, ids kept, median confidences."""
    kept = pc.sum(pc.is_in(before["id"], after["id"])).as_py()
    median = lambda t: pc.quantile(t["confidence"], q=0.5, interpolation="linear")[0].as_py()  # noqa: E731
    return before.num_rows, after.num_rows, kept, median(before), median(after)


def test_a_pair_past_the_limits_keeps_its_places_and_the_rest_lands(store):
    run = run_for([(CELL, "bakery"), (CELL, "cafe")])
    old = places_table(_places("bakery", range(40)) + _places("cafe", range(30), prefix="c"))
    store.write_import(run, OLD, old, NOW - timedelta(days=40))
    # Bakeries: 35 of 40 gone, 2 new. Cafes: one gone, two new, a little more sure.
    new = places_table(
        _places("bakery", range(35, 40))
        + _places("bakery", range(100, 102), confidence=0.9)
        + _places("cafe", range(1, 32), confidence=0.82, prefix="c")
    )
    written = store.write_import(run, NEW, new, NOW, gate=LIMITS)

    assert set(written.compared) == {(CELL, "bakery"), (CELL, "cafe")}
    assert set(written.held) == {(CELL, "bakery")}
    bakery = written.held[(CELL, "bakery")]
    drift = bakery.drift
    expected = _independent(
        old.filter(pc.equal(old["category"], "bakery")), new.filter(pc.equal(new["category"], "bakery"))
    )
    assert (drift.before, drift.after, drift.kept, drift.confidence_before, drift.confidence_after) == pytest.approx(
        expected
    )
    assert (drift.kept_release, drift.release) == (OLD, NEW)
    assert "count changed by -82%" in bakery.reasons and "12% of the places kept by id" in bakery.reasons

    # Campaigns keep the old bakeries; the pair says so, dated now (tried again with the release after next).
    assert place_ids(store, CELL, "bakery") == {f"p{i}" for i in range(40)}
    assert place_ids(store, CELL, "cafe") == {f"c{i}" for i in range(1, 32)}
    table = imports_table(store)
    assert table[(CELL, "bakery")] == (OLD, 40, NOW)
    assert table[(CELL, "cafe")] == (NEW, 31, NOW)
    assert written.rows == {(CELL, "bakery"): 40, (CELL, "cafe"): 31}
    assert query(store, "SELECT DISTINCT release FROM places WHERE category = 'bakery'") == [(OLD,)]
    assert store.held_imports() == [bakery]
    held_rows = query(store, "SELECT id, release FROM held_places ORDER BY id")
    assert held_rows == sorted((f"p{i}", NEW) for i in [*range(35, 40), 100, 101])


def test_accepting_lands_the_held_rows_once(store):
    run = run_for([(CELL, "pub")])
    store.write_import(run, OLD, places_table(_places("pub", range(20))), NOW - timedelta(days=40))
    store.write_import(run, NEW, places_table(_places("pub", range(200))), NOW, gate=LIMITS)
    (held,) = store.held_imports()
    assert held.drift.after == 200 and held.reasons.startswith("count changed by +900%")

    accepted = store.accept_held(CELL, "pub")
    assert accepted == held
    assert place_ids(store, CELL, "pub") == {f"p{i}" for i in range(200)}
    release, rows, imported_at = imports_table(store)[(CELL, "pub")]
    assert (release, rows) == (NEW, 200) and imported_at > NOW
    assert store.held_imports() == []
    assert query(store, "SELECT count(*) FROM held_places") == [(0,)]

    before = imports_table(store)
    with pytest.raises(InvalidInput, match=re.escape("nothing is held for pub in cell:53.5,-2")):
        store.accept_held(CELL, "pub")
    with pytest.raises(InvalidInput):
        store.accept_held("cell:53.25,-2", "pub")
    assert imports_table(store) == before


def test_what_is_not_compared_or_not_held(store):
    run = run_for([(CELL, "bar"), (CELL, "pub"), (CELL, "cafe")])
    old = places_table(_places("bar", range(19)) + _places("pub", range(40)) + _places("cafe", range(40)))
    store.write_import(run, NEW, old, NOW - timedelta(days=40))
    # The same release read again is taken as it is, however different.
    written = store.write_import(
        run, NEW, places_table(_places("cafe", range(3))), NOW - timedelta(days=1), gate=LIMITS
    )
    assert written.compared == {} and written.held == {}
    assert place_ids(store, CELL, "pub") == set()

    store.write_import(run, OLD, places_table(_places("bar", range(19)) + _places("cafe", range(40))), NOW)
    # 19 bars before are too few to hold; no gate at all lands everything (the accepted re-import).
    written = store.write_import(run, NEXT, places_table(_places("bar", range(2))), NOW, gate=LIMITS)
    assert set(written.compared) == {(CELL, "bar"), (CELL, "cafe")} and set(written.held) == {(CELL, "cafe")}
    assert place_ids(store, CELL, "bar") == {"p0", "p1"}
    store.write_import(run, NEXT, places_table(_places("cafe", range(1))), NOW)
    assert store.held_imports() == [] and place_ids(store, CELL, "cafe") == {"p0"}


def test_a_later_release_that_passes_replaces_what_was_held(store):
    run = run_for([(CELL, "cafe")])
    store.write_import(run, OLD, places_table(_places("cafe", range(40))), NOW - timedelta(days=80))
    store.write_import(
        run, NEW, places_table(_places("cafe", range(40), confidence=0.99)), NOW - timedelta(days=40), gate=LIMITS
    )
    (held,) = store.held_imports()
    assert held.reasons == "median confidence moved by +0.19 (0.80 -> 0.99), beyond 0.15"
    written = store.write_import(run, NEXT, places_table(_places("cafe", range(2, 41))), NOW, gate=LIMITS)
    assert written.held == {} and written.compared[(CELL, "cafe")].kept_release == OLD
    assert store.held_imports() == [] and query(store, "SELECT count(*) FROM held_places") == [(0,)]
    assert imports_table(store)[(CELL, "cafe")] == (NEXT, 39, NOW)


def test_version_15_upgrades_a_store_that_holds_imports(database_url):
    store = store_at_version(database_url, 14)
    run = run_for([(CELL, "cafe")])
    with writing_before_version_15():
        store.write_import(run, OLD, places_table(_places("cafe", range(30))), NOW - timedelta(days=40))
    store.migrate()
    assert schema_version(store) == MIGRATIONS[-1][0]
    store.write_import(run, NEW, places_table(_places("cafe", range(3))), NOW, gate=LIMITS)
    assert [h.drift.before for h in store.held_imports()] == [30]


def test_an_accepted_re_import_is_measured_and_lands(store):
    run = run_for([(CELL, "pub")])
    store.write_import(run, OLD, places_table(_places("pub", range(40))), NOW - timedelta(days=40))
    written = store.write_import(run, NEW, places_table(_places("pub", range(4))), NOW, gate=LIMITS, accept=True)
    assert written.compared[(CELL, "pub")].after == 4 and written.held == {}
    assert place_ids(store, CELL, "pub") == {f"p{i}" for i in range(4)}
    assert imports_table(store)[(CELL, "pub")] == (NEW, 4, NOW)


def test_a_held_pair_is_fresh_not_failed_and_read_again_after_fresh_days(store):
    run = run_for([(CELL, "pub")])
    store.write_import(run, OLD, places_table(_places("pub", range(40))), NOW - timedelta(days=40))
    store.write_import(run, NEW, places_table(_places("pub", range(4))), NOW, gate=LIMITS)
    rows = store.import_rows([CELL], ["pub"])
    areas = {CELL: parse_area_key(CELL)}
    for days, missing in ((0, {}), (FRESH_DAYS - 1, {}), (FRESH_DAYS, {CELL: ["pub"]})):
        needs = import_needs(areas, ["pub"], rows, NOW + timedelta(days=days))
        assert (needs.missing, needs.coming) == (missing, set()), days
    # The reservation's compare-and-set agrees: nothing to take before FRESH_DAYS, the pair after.
    assert reserve_pairs(store, {CELL: ["pub"]}, NOW + timedelta(days=1), NOW + timedelta(days=1)) == {}
    later = NOW + timedelta(days=FRESH_DAYS)
    assert reserve_pairs(store, {CELL: ["pub"]}, later, later) == {CELL: ["pub"]}
    # Marked for the next read, the pair still holds its places and what was held.
    assert place_ids(store, CELL, "pub") == {f"p{i}" for i in range(40)}
    assert [h.drift.after for h in store.held_imports()] == [4]
