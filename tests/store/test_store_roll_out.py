"""A release's roll-out in the store, on both backends: chosen loaded pairs read as missing at once and are reserved
like any missing pair; the mark ends the request; how far a release has reached, and when the rest move at the
35-day pace."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_helpers import NOW, imports_table, needs_of, places_table, query, record_release, run_for

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import FRESH_DAYS, PointLocation, Targeting, areas_for
from nakodo_dagster.store import RollOut

OLD, NEW = "2026-10-15.0", "2026-11-18.0"
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe", "pub"))
CELL = next(iter(areas_for(LEEDS)))
ELSEWHERE = "cell:40,-4"
LOADED_AT = NOW - timedelta(days=3)


@pytest.fixture
def loaded(store):
    """Leeds' cafes and pubs and a pair no campaign needs, all loaded from OLD three days ago: fresh."""
    store.add_campaign("Leeds", LEEDS)
    record_release(store, [(CELL, "cafe"), (CELL, "pub")], LOADED_AT, OLD)
    record_release(store, [(ELSEWHERE, "cafe")], LOADED_AT, OLD)
    assert needs_of(store, NOW).missing == {}
    return store


def roll_outs(store) -> dict[tuple[str, str], str]:
    return {(a, c): r for a, c, r in query(store, "SELECT area, category, roll_out FROM place_imports") if r}


def test_a_category_rolled_out_is_missing_now_and_the_rest_stays_fresh(loaded):
    assert loaded.roll_out(NEW, category="pub") == 1

    assert needs_of(loaded, NOW).missing == {CELL: ["pub"]}
    assert roll_outs(loaded) == {(CELL, "pub"): NEW}
    # Asked for like any missing pair, and the mark ends the request.
    reservation = loaded.reserve_missing(NOW, max_runs=10)
    assert [run.pairs for run in reservation.runs] == [((CELL, "pub"),)]
    assert roll_outs(loaded) == {}
    assert loaded.roll_out(NEW, category="pub") == 0, "on its way: nothing to ask again"


def test_a_campaign_whose_first_pair_moves_has_had_its_first_businesses(loaded):
    loaded.roll_out(NEW)
    loaded.reserve_missing(NOW, max_runs=10)

    _, (line,) = loaded.import_line(NOW)
    assert (line.name, line.first_pair) == ("Leeds", "fresh"), "not waiting for its first businesses"


def test_everything_rolled_out_is_every_needed_pair_and_only_those(loaded):
    assert loaded.roll_out(NEW) == 2
    assert set(roll_outs(loaded)) == {(CELL, "cafe"), (CELL, "pub")}, "a pair no campaign needs waits for one"
    assert loaded.roll_out(NEW) == 0, "asked once"


def test_a_campaigns_roll_out_is_its_own_pairs(loaded):
    other = loaded.add_campaign("Leeds bakeries", Targeting(LEEDS.locations, ("bakery",)))
    record_release(loaded, [(CELL, "bakery")], LOADED_AT, OLD)

    assert loaded.roll_out(NEW, campaign_id=other) == 1
    assert roll_outs(loaded) == {(CELL, "bakery"): NEW}


def test_a_pair_on_the_release_or_held_at_its_gate_is_left_as_it_is(loaded):
    record_release(loaded, [(CELL, "cafe")], LOADED_AT, NEW)
    run = run_for([(CELL, "pub")])
    loaded.write_import(run, OLD, places_table(_pubs(range(40))), LOADED_AT)
    held = loaded.write_import(run, NEW, places_table(_pubs(range(35, 37))), NOW, gate=DriftLimits())
    assert set(held.held) == {(CELL, "pub")}

    assert loaded.roll_out(NEW) == 0
    assert needs_of(loaded, NOW).missing == {}


def test_a_landed_pair_has_moved(loaded):
    loaded.roll_out(NEW, category="cafe")
    loaded.write_import(run_for([(CELL, "cafe")]), NEW, places_table([]), NOW)
    assert needs_of(loaded, NOW).missing == {}


def test_how_far_a_release_has_reached(loaded):
    assert loaded.roll_out_status(NEW, NOW) == RollOut(NEW, 0, 3, 0, LOADED_AT + timedelta(days=FRESH_DAYS))
    record_release(loaded, [(CELL, "cafe")], NOW, NEW)
    loaded.roll_out(NEW, category="pub")

    status = loaded.roll_out_status(NEW, NOW)

    assert status == RollOut(NEW, 1, 3, 1, LOADED_AT + timedelta(days=FRESH_DAYS))
    assert "1 of 3 loaded pairs on it; 1 asked to move now" in status.in_words()
    assert "nakodo imports roll-out 2026-11-18.0" in status.in_words()
    record_release(loaded, [(CELL, "pub")], NOW, NEW)
    record_release(loaded, [(ELSEWHERE, "cafe")], NOW, NEW)
    assert loaded.roll_out_status(NEW, NOW) == RollOut(NEW, 3, 3, 0, None)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"release": "newest"}, "YYYY-MM-DD.N"),
        ({"release": NEW, "category": "Pubs!"}, "category 'Pubs!' is not allowed"),
        ({"release": NEW, "campaign_id": 99}, "99"),
    ],
)
def test_bad_input_writes_nothing(loaded, arguments, error):
    before = imports_table(loaded)
    with pytest.raises(InvalidInput, match=error):
        loaded.roll_out(**arguments)
    assert imports_table(loaded) == before
    assert roll_outs(loaded) == {}


def test_a_paused_campaign_is_refused(loaded):
    paused = loaded.add_campaign("Leeds paused", LEEDS)
    loaded.set_campaign_status(paused, "paused")
    with pytest.raises(InvalidInput, match="paused"):
        loaded.roll_out(NEW, campaign_id=paused)
    assert roll_outs(loaded) == {}


def _pubs(ids: range) -> list[dict]:
    return [{"id": f"p{i}", "area": CELL, "category": "pub", "lat": 53.8, "lng": -1.55} for i in ids]
