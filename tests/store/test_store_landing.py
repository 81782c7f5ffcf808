"""Every path that lands a pair's rows records what changed, on both backends: an import run as the sensor launches
it, an analyst's re-import by hand, an analyst's acceptance of rows the drift gate held (`nakodo imports accept`),
and a changelog's carry-over. Whichever lands a month's bakeries, the campaign's next search lists the business
reissued under its new id, the one closed as closed and the ones gone as removed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from store_helpers import places_table, query, run_for

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.placement import PointLocation, Targeting

R1, R2, R3 = "2026-10-15.0", "2026-11-18.0", "2026-12-16.0"
CELL = "cell:53.5,-2"
RUN = run_for([(CELL, "bakery")])
LEEDS = Targeting((PointLocation(53.7, -1.6, 10),), ("bakery",))
METRE = 1 / 111_195
# Early enough that every path's stamps, the acceptance's own (the clock's) included, come after the first search.
START = datetime.now(UTC) - timedelta(days=40)


def _bakery(number: int, lat: float = 53.7, name: str | None = None, **extra: object) -> dict:
    return {
        "id": f"b{number}",
        "area": CELL,
        "category": "bakery",
        "name": name or f"Bakery {number}",
        "lat": lat,
        "lng": -1.6 + number * 0.001,
        "sources": f"meta:{number}",
        **extra,
    }


# 40 bakeries; a month on, b0 to b2 stay, b3 is closed for good, b4 is reissued as n4 120 m off and spelled another
# way with its source record unchanged, and the other 35 are gone: past the drift gate's limits.
MONTH_1 = [_bakery(i) for i in range(40)]
MONTH_2 = [
    *(_bakery(i) for i in range(3)),
    _bakery(3, closed=True, confidence=0.0),
    {**_bakery(4, lat=53.7 + 120 * METRE, name="Bakerie No. 4"), "id": "n4"},
]
EXPECTED = {
    "b0": (None, None),
    "b1": (None, None),
    "b2": (None, None),
    "b3": (None, R2),
    "n4": (None, None),
    **{f"b{i}": (R2, None) for i in range(5, 40)},
}


def _sensor_run(store, at: datetime) -> None:
    store.write_import(RUN, R2, places_table(MONTH_2), at)


def _by_hand(store, at: datetime) -> None:
    store.write_import(RUN, R2, places_table(MONTH_2), at, gate=DriftLimits(), accept=True)


def _accepted(store, at: datetime) -> None:
    written = store.write_import(RUN, R2, places_table(MONTH_2), at, gate=DriftLimits())
    assert set(written.held) == {(CELL, "bakery")}
    store.accept_held(CELL, "bakery")


LANDINGS: dict[str, Callable] = {"sensor's run": _sensor_run, "by hand": _by_hand, "accepted": _accepted}


def _results(store, campaign: int) -> dict[str, tuple[str | None, str | None]]:
    rows = store.campaign_results(campaign)
    assert len({row["id"] for row in rows}) == len(rows), "a business listed twice"
    return {row["id"]: (row["removed_in"], row["closed_in"]) for row in rows}


def _searched_after_month_1(store) -> int:
    store.write_import(RUN, R1, places_table(MONTH_1), START)
    campaign = store.add_campaign("Leeds bakeries", LEEDS)
    store.add_campaign_businesses(campaign, START + timedelta(hours=1))
    assert _results(store, campaign) == {f"b{i}": (None, None) for i in range(40)}
    return campaign


@pytest.mark.parametrize("path", LANDINGS)
def test_every_path_that_lands_rows_records_what_changed(store, path):
    campaign = _searched_after_month_1(store)
    LANDINGS[path](store, START + timedelta(days=36))
    store.add_campaign_businesses(campaign, datetime.now(UTC) + timedelta(minutes=2))
    assert _results(store, campaign) == EXPECTED
    # A new campaign lists what operates: neither the closed bakery nor the gone ones.
    newcomer = store.add_campaign("Leeds bakeries, later", LEEDS)
    store.add_campaign_businesses(newcomer, datetime.now(UTC) + timedelta(minutes=2))
    assert _results(store, newcomer) == dict.fromkeys(["b0", "b1", "b2", "n4"], (None, None))


def test_a_held_pair_changes_nothing_until_accepted(store):
    campaign = _searched_after_month_1(store)
    store.write_import(RUN, R2, places_table(MONTH_2), START + timedelta(days=36), gate=DriftLimits())
    store.add_campaign_businesses(campaign, START + timedelta(days=36, hours=1))
    assert _results(store, campaign) == {f"b{i}": (None, None) for i in range(40)}


def test_a_carry_over_lands_through_the_same_path_and_changes_nothing(store):
    campaign = _searched_after_month_1(store)
    _sensor_run(store, START + timedelta(days=36))
    store.add_campaign_businesses(campaign, START + timedelta(days=36, hours=1))
    changes_before = query(store, "SELECT count(*) FROM place_changes")

    carried = store.carry_over([(CELL, "bakery")], R3, R2, removed=[], now=START + timedelta(days=38))

    assert carried.rows == {(CELL, "bakery"): 4}
    assert query(store, "SELECT DISTINCT release, sources FROM places WHERE id = 'n4'") == [(R3, "meta:4")]
    assert query(store, "SELECT count(*) FROM place_changes") == changes_before
    store.add_campaign_businesses(campaign, START + timedelta(days=38, hours=1))
    assert _results(store, campaign) == EXPECTED
