"""Campaigns, and the businesses each one gets from what is loaded: within its radius, nearest first, once."""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg2
import pytest
from geographiclib.geodesic import Geodesic
from store_helpers import (
    NOW,
    RELEASE,
    places_table,
    query,
    reading_before_version_18,
    schema_version,
    store_at_version,
    writing_before_version_13,
    writing_before_version_15,
)

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    CountryLocation,
    PointLocation,
    Targeting,
    areas_for,
    cell_containing,
    import_runs,
)
from nakodo_dagster.search import campaign_progress
from nakodo_dagster.store import Store, open_store, targeting_from_json, targeting_to_json
from nakodo_dagster.store.postgres_store import _SEARCH_CONNECTIONS, PostgresStore
from nakodo_dagster.store.schema import MIGRATIONS
from nakodo_dagster.store.search import POSTGRES_SHARE_OF_PLACES

LEEDS = Targeting((PointLocation(53.80, -1.55, 10), PointLocation(53.70, -1.40, 5)), ("cafe", "bakery"))
# One point and no country: a search measures each place once (search.add_found_businesses).
LEEDS_CENTRE = Targeting(LEEDS.locations[:1], LEEDS.categories)
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


@pytest.mark.parametrize("targeting", [LEEDS, LEEDS_CENTRE], ids=["two points", "one point"])
def test_businesses_match_an_independent_geodesic_computation(store, targeting):
    rng = random.Random(53)
    rows = _random_places(rng, 1500, "p")
    _load(store, targeting, rows)
    campaign = store.add_campaign("Leeds", targeting)
    added, total = store.add_campaign_businesses(campaign, NOW)
    results = store.campaign_results(campaign)
    expected, unclear = _expected(rows, targeting)
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
        "removed_in",
        "closed_in",
    }

    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=2)) == (0, total)

    # New places land later: only they are added. Re-importing without the old ones keeps the snapshot.
    new_rows = _random_places(rng, 300, "q")
    _load(store, targeting, new_rows, now=NOW + timedelta(hours=1))
    new_expected, new_unclear = _expected(new_rows, targeting)
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


def _land(store, targeting: Targeting, rows: list[dict], category: str, now) -> None:
    """One category's pairs over the campaign's areas land at ``now`` (the other rows are not theirs)."""
    areas = areas_for(targeting)
    for run in import_runs({area: [category] for area in areas}, areas):
        store.write_import(run, RELEASE, places_table(rows), now)


def _snapshot(store, campaign_id: int) -> dict[str, tuple]:
    return {r["id"]: (r["category"], round(r["distance_km"], 9)) for r in store.campaign_results(campaign_id)}


def test_searches_of_one_campaign_at_once_add_each_business_once(store):
    rows = _random_places(random.Random(7), 1500, "p")
    _load(store, LEEDS, rows)
    campaign = store.add_campaign("Leeds", LEEDS)
    with ThreadPoolExecutor(4) as pool:
        searches = list(pool.map(lambda _: store.add_campaign_businesses(campaign, NOW), range(4)))
    results = store.campaign_results(campaign)
    assert len(results) == len({r["id"] for r in results}) > 100
    # One search found everything; the others, after it, found nothing new.
    assert sorted(added for added, _ in searches) == [0, 0, 0, len(results)]
    assert all(total == len(results) for _, total in searches)


def test_searches_as_places_land_give_what_one_search_at_the_end_gives(store):
    rng = random.Random(11)
    rows = _random_places(rng, 1200, "p")
    step = store.add_campaign("Searched as places land", LEEDS)
    assert store.add_campaign_businesses(step, NOW) == (0, 0)

    _land(store, LEEDS, rows, "cafe", NOW + timedelta(minutes=5))
    cafes, total = store.add_campaign_businesses(step, NOW + timedelta(minutes=10))
    _land(store, LEEDS, rows, "pub", NOW + timedelta(minutes=15))
    _land(store, LEEDS, rows, "bakery", NOW + timedelta(minutes=20))
    bakeries, total = store.add_campaign_businesses(step, NOW + timedelta(minutes=30))
    once = store.add_campaign_businesses(step, NOW + timedelta(minutes=40))
    end = store.add_campaign("Searched once at the end", LEEDS)
    store.add_campaign_businesses(end, NOW + timedelta(minutes=40))

    assert cafes > 0 and bakeries > 0 and once == (0, total) and total == cafes + bakeries
    assert _snapshot(store, step) == _snapshot(store, end)
    expected, unclear = _expected(rows, LEEDS)
    assert set(_snapshot(store, step)) - unclear == set(expected) - unclear


def test_a_place_of_two_categories_is_added_once_under_the_first_to_land(store):
    place = {"id": "both", "area": cell_containing(53.8, -1.55).key, "lat": 53.8, "lng": -1.55}
    rows = [{**place, "category": "bakery"}, {**place, "category": "cafe"}]
    campaign = store.add_campaign("Leeds", LEEDS)
    _land(store, LEEDS, rows, "bakery", NOW)
    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=5)) == (1, 1)
    _land(store, LEEDS, rows, "cafe", NOW + timedelta(minutes=10))
    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=15)) == (0, 1)
    assert [(r["id"], r["category"]) for r in store.campaign_results(campaign)] == [("both", "bakery")]


def test_an_import_committing_while_a_search_runs_is_found_by_the_next(store):
    campaign = store.add_campaign("Leeds", LEEDS)
    store.add_campaign_businesses(campaign, NOW)
    # Stamped 30 s before that search began but committed after it looked: it saw nothing of it.
    late = [{"id": "late", "area": cell_containing(53.8, -1.55).key, "category": "cafe", "lat": 53.8, "lng": -1.55}]
    _land(store, LEEDS, late, "cafe", NOW - timedelta(seconds=30))

    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=2)) == (1, 1)


def test_a_new_location_searches_what_was_loaded_before_again(store):
    leeds = Targeting((PointLocation(53.80, -1.55, 2),), ("cafe",))
    near = {"id": "centre", "lat": 53.80, "lng": -1.55}
    # Same cell, outside the first circle, inside the one added later.
    later = {"id": "headingley", "lat": 53.82, "lng": -1.60}
    rows = [{**r, "area": cell_containing(r["lat"], r["lng"]).key, "category": "cafe"} for r in (near, later)]
    _land(store, leeds, rows, "cafe", NOW)
    campaign = store.add_campaign("Leeds", leeds)
    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=5)) == (1, 1)

    store.add_campaign_location(campaign, PointLocation(53.82, -1.60, 2))

    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=10)) == (1, 2)
    assert [r["id"] for r in store.campaign_results(campaign)] == ["centre", "headingley"]


def _searched_reference(postgres_url: str):
    """A PostgreSQL store with the Leeds places loaded, and a campaign's businesses searched with no fault."""
    store = open_store(postgres_url)
    store.migrate()
    _load(store, LEEDS, _random_places(random.Random(5), 1500, "p"))
    reference = store.add_campaign("Leeds", LEEDS)
    store.add_campaign_businesses(reference, NOW)
    return store, _snapshot(store, reference)


def _refuse(postgres_url: str, statement: str, *params: object) -> None:
    """A trigger that fails the writes ``statement`` (its ON ... WHEN part) names, the way a server refuses a write;
    half a second late, so that the other connections' shares are written by then."""
    with psycopg2.connect(postgres_url) as connection, connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql "
            "AS 'BEGIN PERFORM pg_sleep(0.5); RAISE EXCEPTION ''refused by the test''; END'"
        )
        cursor.execute(f"CREATE TRIGGER refuse BEFORE INSERT OR UPDATE {statement} EXECUTE FUNCTION refuse()", params)


def _allow(postgres_url: str, table: str) -> None:
    with psycopg2.connect(postgres_url) as connection, connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER refuse ON {table}")


# PostgreSQL spreads a campaign's first search over connections, a share of its places each: one share failing
# fails them all, and a search failing once they committed loses nothing and adds nothing twice after.
@pytest.mark.postgres
@pytest.mark.parametrize("part", range(_SEARCH_CONNECTIONS))
def test_a_first_search_over_connections_adds_nothing_when_one_share_fails(postgres_url, part):
    store, reference = _searched_reference(postgres_url)
    [(refused,)] = query(
        store,
        f"SELECT min(p.id) FROM places AS p WHERE p.id IN (SELECT place_id FROM campaign_businesses) "
        f"AND {POSTGRES_SHARE_OF_PLACES}",
        parts=_SEARCH_CONNECTIONS,
        part=part,
    )
    _refuse(postgres_url, "ON campaign_businesses FOR EACH ROW WHEN (NEW.place_id = %s)", refused)
    campaign = store.add_campaign("Leeds again", LEEDS)

    with pytest.raises(psycopg2.Error, match="refused by the test"):
        store.add_campaign_businesses(campaign, NOW)

    assert store.campaign_results(campaign) == []
    _allow(postgres_url, "campaign_businesses")
    assert store.add_campaign_businesses(campaign, NOW) == (len(reference), len(reference))
    assert _snapshot(store, campaign) == reference


# Each connection's share is exactly one partition's places, so that no two connections write the same table.
@pytest.mark.postgres
@pytest.mark.parametrize("part", range(_SEARCH_CONNECTIONS))
def test_each_share_of_a_first_search_is_one_partition_of_the_businesses(postgres_url, part):
    store, reference = _searched_reference(postgres_url)
    share = {
        place_id
        for (place_id,) in query(
            store,
            f"SELECT p.id FROM places AS p WHERE {POSTGRES_SHARE_OF_PLACES}",
            parts=_SEARCH_CONNECTIONS,
            part=part,
        )
    }
    partition = {place_id for (place_id,) in query(store, f"SELECT place_id FROM campaign_businesses_part_{part}")}

    assert 0 < len(partition) < len(reference)
    assert partition == share & set(reference)


@pytest.mark.postgres
def test_a_first_search_failing_after_its_shares_committed_is_completed_by_the_next(postgres_url):
    store, reference = _searched_reference(postgres_url)
    campaign = store.add_campaign("Leeds again", LEEDS)
    _refuse(postgres_url, "ON campaign_searches FOR EACH ROW")

    with pytest.raises(psycopg2.Error, match="refused by the test"):
        store.add_campaign_businesses(campaign, NOW)

    # The other connections' shares committed before the search's own transaction failed to record it.
    assert 0 < len(store.campaign_results(campaign)) < len(reference)
    _allow(postgres_url, "campaign_searches")
    added, total = store.add_campaign_businesses(campaign, NOW + timedelta(minutes=1))
    assert 0 < added < total == len(reference)
    assert _snapshot(store, campaign) == reference
    assert store.add_campaign_businesses(campaign, NOW + timedelta(minutes=3)) == (0, len(reference))


# Ages of place_imports rows on and around each boundary of the freshness rule.
_AGES = [
    timedelta(0),
    timedelta(hours=1),
    timedelta(hours=IMPORT_HOURS) - timedelta(microseconds=1),
    timedelta(hours=IMPORT_HOURS),
    timedelta(days=RETRY_DAYS) - timedelta(microseconds=1),
    timedelta(days=RETRY_DAYS),
    timedelta(days=FRESH_DAYS) - timedelta(microseconds=1),
    timedelta(days=FRESH_DAYS),
    timedelta(days=40),
]


@pytest.mark.parametrize("seed", range(4))
def test_search_progress_agrees_with_import_needs_on_every_boundary(store, seed):
    rng = random.Random(seed)
    campaigns = [store.add_campaign("Leeds", LEEDS), store.add_campaign("Luxembourg", LUXEMBOURG)]
    paused = store.add_campaign("Paused", LEEDS)
    store.set_campaign_status(paused, "paused")
    pairs = {(a, c) for t in (LEEDS, LUXEMBOURG) for a in areas_for(t) for c in t.categories}
    for area, category in sorted(pairs):
        if rng.random() < 0.8:
            # A release, a mark (on its way or lost), or a mark whose failure was recorded at its time.
            release, failure = rng.choice([(RELEASE, None), (REQUESTED, None), (REQUESTED, "file unreadable")])
            query(
                store,
                "INSERT INTO place_imports (area, category, release, rows, imported_at, failure) "
                "VALUES ($area, $category, $release, 0, $at, $failure) RETURNING area",
                area=area,
                category=category,
                release=release,
                at=NOW - rng.choice(_AGES),
                failure=failure,
            )

    progress = {p.campaign_id: p for p in store.search_progress(NOW)}

    assert list(progress) == campaigns
    for campaign_id in campaigns:
        campaign = store.campaign(campaign_id)
        expected = campaign_progress(store, campaign, None, NOW)
        off = campaign_progress(store, campaign, "imports are off", NOW)
        got = progress[campaign_id]
        states = Counter(expected.states.values())
        assert (got.areas, got.coming, got.missing, got.failed) == (
            len(expected.areas),
            states["coming"],
            states["missing"],
            states["failed"],
        )
        assert (got.pending(True), got.pending(False)) == (expected.pending, off.pending)
        assert got.not_loaded == expected.not_loaded
        assert got.arrived_at == expected.needs.arrived_at
    assert [p.campaign_id for p in store.search_progress(NOW, [paused])] == [paused]


def test_a_store_of_version_8_keeps_its_businesses_and_searches_on(database_url, monkeypatch):
    store = store_at_version(database_url, 8)
    assert schema_version(store) == 8
    rng = random.Random(9)
    with writing_before_version_15():
        _load(store, LEEDS, _random_places(rng, 600, "p"))
    with writing_before_version_13():
        campaigns = [store.add_campaign(name, LEEDS) for name in ("Leeds", "Leeds again")]
    with monkeypatch.context() as version_8:
        # Searched as version 8 searched, in one statement: the shares of a PostgreSQL first search are its
        # partitions, which came with version 12.
        version_8.setattr(PostgresStore, "_insert_found", Store._insert_found)
        for campaign in campaigns:
            store.add_campaign_businesses(campaign, NOW)
    with reading_before_version_18():
        held = [store.campaign_results(campaign) for campaign in campaigns]

    store.migrate()

    assert schema_version(store) == MIGRATIONS[-1][0] == 20
    assert [store.campaign_results(campaign) for campaign in campaigns] == held
    # The search goes on from what each campaign holds: only the places landed since, each once.
    new_rows = _random_places(rng, 300, "q")
    _load(store, LEEDS, new_rows, now=NOW + timedelta(hours=1))
    added, total = store.add_campaign_businesses(campaigns[0], NOW + timedelta(hours=1))
    results = store.campaign_results(campaigns[0])
    assert 0 < added == total - len(held[0]) and total == len(results) == len({r["id"] for r in results})
    new_expected, new_unclear = _expected(new_rows, LEEDS)
    later = {r["id"] for r in results} - {r["id"] for r in held[0]}
    assert later - new_unclear == set(new_expected) - new_unclear
    assert store.campaign_results(campaigns[1]) == held[1]
    if database_url.startswith("postgresql"):
        [(index,)] = query(store, "SELECT indexdef FROM pg_indexes WHERE tablename = 'campaign_businesses'")
        assert "UNIQUE INDEX" in index and "(campaign_id, place_id)" in index
