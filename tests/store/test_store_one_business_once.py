"""One business once across releases, on both backends: a place whose id changed keeps its place in a campaign
under its new id, a place gone from the newest release is marked removed in the campaign's results, and one that
comes back is listed again; a campaign that missed a release's search ends as one that searched after each."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_helpers import NOW, places_table, run_for

from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.same_business import REISSUE_METRES

R1, R2, R3 = "2026-09-17.0", "2026-10-15.0", "2026-11-18.0"
CELL, NEIGHBOUR = "cell:53.5,-2", "cell:53.5,-1.5"
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe",))
# Metres to degrees of latitude.
METRE = 1 / 111_195


def _cafe(id_: str, name: str, lat: float, lng: float = -1.6, area: str = CELL) -> dict:
    return {"id": id_, "area": area, "category": "cafe", "name": name, "lat": lat, "lng": lng}


def _write(store, release: str, rows: list[dict], hours: float) -> None:
    store.write_import(
        run_for([(CELL, "cafe"), (NEIGHBOUR, "cafe")]), release, places_table(rows), NOW + timedelta(hours=hours)
    )


def _results(store, campaign: int) -> dict[str, str | None]:
    results = store.campaign_results(campaign)
    assert len({r["id"] for r in results}) == len(results), "a business listed twice"
    return {r["id"]: r["removed_in"] for r in results}


RELEASE_1 = [
    _cafe("a1", "Café Nero", 53.80),
    _cafe("b", "Bean There", 53.81),
    _cafe("c", "Cup", 53.82),
    _cafe("d", "Dalton's", 53.83),
    # Two shops of one chain 30 m apart, both reissued: each keeps its own new id.
    _cafe("s1", "Starbucks", 53.84),
    _cafe("t1", "Starbucks", 53.84 + 30 * METRE),
]
# a1 reissued 10 m away under another spelling's case and spaces; b closed; d moved to the next cell (still in reach);
# e opened; the chain's shops reissued.
RELEASE_2 = [
    _cafe("a2", "café  nero", 53.80 + 10 * METRE),
    _cafe("c", "Cup", 53.82),
    _cafe("d", "Dalton's", 53.83, lng=-1.45, area=NEIGHBOUR),
    _cafe("e", "Espresso", 53.85),
    _cafe("s2", "Starbucks", 53.84 + 2 * METRE),
    _cafe("t2", "Starbucks", 53.84 + 31 * METRE),
]
# a2 reissued again; b back; c closed; a look-alike of e too far off to be e (e itself stays).
RELEASE_3 = [
    _cafe("a3", "CAFÉ NERO", 53.80 + 12 * METRE),
    _cafe("b", "Bean There", 53.81),
    _cafe("d", "Dalton's", 53.83, lng=-1.45, area=NEIGHBOUR),
    _cafe("e", "Espresso", 53.85),
    _cafe("e-far", "Espresso", 53.85 + (REISSUE_METRES + 20) * METRE),
    _cafe("s2", "Starbucks", 53.84 + 2 * METRE),
    _cafe("t2", "Starbucks", 53.84 + 31 * METRE),
]


def test_a_campaign_lists_each_business_once_across_three_releases(store):
    eager = store.add_campaign("Leeds every release", LEEDS)
    late = store.add_campaign("Leeds missed one", LEEDS)

    _write(store, R1, RELEASE_1, hours=0)
    store.add_campaign_businesses(eager, NOW + timedelta(hours=1))
    store.add_campaign_businesses(late, NOW + timedelta(hours=1))
    assert _results(store, eager) == dict.fromkeys(["a1", "b", "c", "d", "s1", "t1"])

    _write(store, R2, RELEASE_2, hours=2)
    added, total = store.add_campaign_businesses(eager, NOW + timedelta(hours=3))
    assert _results(store, eager) == {"a2": None, "b": R2, "c": None, "d": None, "e": None, "s2": None, "t2": None}
    assert (added, total) == (1, 7), "only e is new"

    _write(store, R3, RELEASE_3, hours=4)
    final = {"a3": None, "b": None, "c": R3, "d": None, "e": None, "e-far": None, "s2": None, "t2": None}
    for campaign in (eager, late):
        added, total = store.add_campaign_businesses(campaign, NOW + timedelta(hours=5))
        assert _results(store, campaign) == final
        assert total == len(final)


def test_a_campaign_holding_a_business_under_both_ids_keeps_it_once(store):
    campaign = store.add_campaign("Leeds", LEEDS)
    # The same cafe under its old id in the cell and, already, its new id in the neighbouring cell's rows.
    _write(store, R1, [_cafe("a1", "Nero", 53.80), _cafe("a2", "Nero", 53.80, lng=-1.45, area=NEIGHBOUR)], hours=0)
    store.add_campaign_businesses(campaign, NOW + timedelta(hours=1))
    assert set(_results(store, campaign)) == {"a1", "a2"}

    _write(store, R2, [_cafe("a2", "Nero", 53.80, lng=-1.45, area=NEIGHBOUR), _cafe("a3", "Nero", 53.80)], hours=2)
    _, total = store.add_campaign_businesses(campaign, NOW + timedelta(hours=3))
    # a1 became a3 in the cell; a2 stays the neighbour's.
    assert _results(store, campaign) == {"a2": None, "a3": None}
    assert total == 2


@pytest.mark.parametrize("metres", [REISSUE_METRES - 5, REISSUE_METRES + 5])
def test_a_reissued_id_is_followed_within_the_distance_only(store, metres):
    campaign = store.add_campaign("Leeds", LEEDS)
    _write(store, R1, [_cafe("a1", "Nero", 53.80)], hours=0)
    store.add_campaign_businesses(campaign, NOW + timedelta(hours=1))
    _write(store, R2, [_cafe("a2", "Nero", 53.80 + metres * METRE)], hours=2)
    store.add_campaign_businesses(campaign, NOW + timedelta(hours=3))
    expected = {"a2": None} if metres <= REISSUE_METRES else {"a1": R2, "a2": None}
    assert _results(store, campaign) == expected
