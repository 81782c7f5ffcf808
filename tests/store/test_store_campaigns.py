"""Campaigns, and the businesses each one gets from what is loaded: within its radius, nearest first, once."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from geographiclib.geodesic import Geodesic
from store_helpers import NOW, RELEASE, places_table

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting, areas_for, cell_containing, import_runs
from nakodo_dagster.store import targeting_from_json, targeting_to_json

LEEDS = Targeting((PointLocation(53.80, -1.55, 10), PointLocation(53.70, -1.40, 5)), ("cafe", "bakery"))
LUXEMBOURG = Targeting((CountryLocation("LU"), PointLocation(49.61, 6.13, 5)), ("cafe",))
# Haversine on a sphere and the WGS84 geodesic differ by up to about 0.5 %: too close to call at the edge.
EDGE = 0.006


def _load(store, targeting: Targeting, rows: list[dict], now=NOW) -> None:
    """Import the rows the way the import runs would: one write per run over the campaign's areas."""
    areas = areas_for(targeting)
    categories = sorted({row["category"] for row in rows} | set(targeting.categories))
    for run in import_runs({area: categories for area in areas}, areas):
        store.write_import(run, RELEASE, places_table(rows), now)


def _random_places(rng: random.Random, count: int, prefix: str) -> list[dict]:
    """Places scattered over the Leeds campaign's cells, some listed under two categories."""
    rows = []
    for i in range(count):
        lat, lng = rng.uniform(53.55, 54.0), rng.uniform(-1.95, -1.1)
        place = {"id": f"{prefix}{i}", "name": f"Business {i % 7}", "lat": lat, "lng": lng}
        place["area"] = cell_containing(lat, lng).key
        categories = rng.choice([["cafe"], ["bakery"], ["pub"], ["bakery", "cafe"]])
        rows += [{**place, "category": category} for category in categories]
    return rows


def _expected(rows: list[dict], targeting: Targeting) -> tuple[dict[str, float], set[str]]:
    """Independently: each wanted place's geodesic distance to its nearest point within radius; and the ids
    too close to a radius to call."""
    points = [loc for loc in targeting.locations if isinstance(loc, PointLocation)]
    expected, unclear = {}, set()
    for row in rows:
        if row["category"] not in targeting.categories:
            continue
        inside = []
        for p in points:
            km = Geodesic.WGS84.Inverse(p.lat, p.lng, row["lat"], row["lng"])["s12"] / 1000
            if abs(km - p.radius_km) <= EDGE * p.radius_km:
                unclear.add(row["id"])
            elif km < p.radius_km:
                inside.append(km)
        if inside:
            expected[row["id"]] = min(inside)
    return expected, unclear


def test_campaigns_round_trip_list_pause_and_resume(store):
    leeds = store.add_campaign("Leeds cafes", LEEDS, now=NOW)
    lux = store.add_campaign("  Luxembourg  ", LUXEMBOURG, now=NOW)
    campaign = store.campaign(leeds)
    assert (campaign.id, campaign.name, campaign.targeting, campaign.status) == (leeds, "Leeds cafes", LEEDS, "active")
    assert campaign.created_at == NOW
    assert store.campaign(lux).targeting == LUXEMBOURG
    assert store.campaign(lux).name == "Luxembourg"
    store.set_campaign_status(leeds, "paused")
    assert [c.id for c in store.campaigns()] == [leeds, lux]
    assert [c.id for c in store.campaigns(active_only=True)] == [lux]
    store.set_campaign_status(leeds, "active")
    assert [c.id for c in store.campaigns(active_only=True)] == [leeds, lux]


@pytest.mark.parametrize("name", ["", "   ", "x" * 201, None, 42])
def test_a_bad_campaign_name_is_refused_and_nothing_written(store, name):
    with pytest.raises(InvalidInput, match="campaign name"):
        store.add_campaign(name, LEEDS)
    assert store.campaigns() == []


def test_unknown_campaigns_and_statuses_are_refused(store):
    leeds = store.add_campaign("Leeds", LEEDS)
    with pytest.raises(InvalidInput, match="does not exist"):
        store.campaign(leeds + 1)
    with pytest.raises(InvalidInput, match="does not exist"):
        store.set_campaign_status(leeds + 1, "paused")
    with pytest.raises(InvalidInput, match="allowed: active, paused"):
        store.set_campaign_status(leeds, "deleted")
    with pytest.raises(InvalidInput, match="whole number"):
        store.campaign_results("1; DROP TABLE campaigns")
    assert store.campaign(leeds).status == "active"


def test_targeting_json_is_checked_like_user_input():
    assert targeting_from_json(targeting_to_json(LUXEMBOURG)) == LUXEMBOURG
    for text in ("not json", "{}", '{"locations": [{"type": "moon"}], "categories": ["cafe"]}'):
        with pytest.raises(InvalidInput):
            targeting_from_json(text)
    with pytest.raises(InvalidInput, match="radius"):
        targeting_from_json(
            '{"locations": [{"type": "point", "lat": 1, "lng": 2, "radius_km": 3}], "categories": ["cafe"]}'
        )


def test_businesses_match_an_independent_geodesic_computation(store):
    rng = random.Random(53)
    rows = _random_places(rng, 1500, "p")
    _load(store, LEEDS, rows)
    campaign = store.add_campaign("Leeds", LEEDS)
    added, total = store.add_campaign_businesses(campaign, NOW)
    results = store.campaign_results(campaign)
    expected, unclear = _expected(rows, LEEDS)
    assert added == total == len(results) > 100
    got = {r["id"]: r for r in results}
    assert set(got) - unclear == set(expected) - unclear
    for id_, km in expected.items():
        if id_ not in unclear:
            assert got[id_]["distance_km"] == pytest.approx(km, rel=EDGE)
    assert [r["distance_km"] for r in results] == sorted(r["distance_km"] for r in results)
    # A place listed as both bakery and cafe is added once, under the campaign's first category.
    both = {row["id"] for row in rows if row["category"] == "bakery"} & {
        row["id"] for row in rows if row["category"] == "cafe"
    }
    assert {got[id_]["category"] for id_ in both & set(got)} == {"cafe"}
    assert set(results[0]) == {
        "id",
        "name",
        "category",
        "lat",
        "lng",
        "distance_km",
        "address",
        "websites",
        "phones",
        "country",
    }

    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=2)) == (0, total)

    # New places land later: only they are added. Re-importing without the old ones keeps the snapshot.
    new_rows = _random_places(rng, 300, "q")
    _load(store, LEEDS, new_rows, now=NOW + timedelta(hours=1))
    new_expected, new_unclear = _expected(new_rows, LEEDS)
    added_later, total_later = store.add_campaign_businesses(campaign, NOW + timedelta(hours=1))
    assert total_later == total + added_later
    later_ids = {r["id"] for r in store.campaign_results(campaign)} - set(got)
    assert later_ids - new_unclear == set(new_expected) - new_unclear


def test_a_country_matches_its_own_places_and_points_give_distances(store):
    centre = [{"id": "lu-centre", "lat": 49.611, "lng": 6.131, "country": "LU", "name": "Centre"}]
    far = [{"id": "lu-north", "lat": 50.05, "lng": 6.0, "country": "LU", "name": "North"}]
    # In Luxembourg's box but Belgian, and a Luxembourg place loaded under a cell rather than the country.
    belgian = [{"id": "be-arlon", "lat": 49.68, "lng": 5.81, "country": "BE", "name": "Arlon"}]
    rows = [{**r, "area": "country:LU", "category": "cafe"} for r in centre + far + belgian]
    rows.append({"id": "lu-cell", "area": "cell:49.5,6", "category": "cafe", "lat": 49.55, "lng": 6.3, "country": "LU"})
    _load(store, LUXEMBOURG, rows)
    campaign = store.add_campaign("Luxembourg", LUXEMBOURG)
    assert store.add_campaign_businesses(campaign, NOW) == (2, 2)
    results = store.campaign_results(campaign)
    assert [r["id"] for r in results] == ["lu-centre", "lu-north"]
    assert results[0]["distance_km"] == pytest.approx(0.1, abs=0.05)
    assert results[1]["distance_km"] is None
    assert results[0]["websites"] == [] and results[0]["country"] == "LU"
