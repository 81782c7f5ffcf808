"""What the command line asks of the store: locations added later, place names kept, failed imports forgotten."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from store_helpers import NOW, RELEASE, imports_table, places_table, query, record_release

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    IMPORT_HOURS,
    REQUESTED,
    CountryLocation,
    PlaceImport,
    PointLocation,
    Targeting,
    areas_for,
    import_runs,
)
from nakodo_dagster.store import PlaceName, open_store

LEEDS = Targeting((PointLocation(53.80, -1.55, 10),), ("cafe",))
CELL = "cell:53.5,-2"


def test_a_location_added_later_joins_the_targeting(store):
    campaign_id = store.add_campaign("Leeds", LEEDS, now=NOW)
    york = PointLocation(53.96, -1.08, 5)
    updated = store.add_campaign_location(campaign_id, york)
    assert updated.targeting == Targeting((*LEEDS.locations, york), LEEDS.categories)
    store.add_campaign_location(campaign_id, CountryLocation("LU"))
    assert store.campaign(campaign_id).targeting.locations == (*LEEDS.locations, york, CountryLocation("LU"))


def test_a_location_already_targeted_or_an_unknown_campaign_is_refused(store):
    campaign_id = store.add_campaign("Leeds", LEEDS, now=NOW)
    with pytest.raises(InvalidInput, match="already targets"):
        store.add_campaign_location(campaign_id, PointLocation(53.80, -1.55, 10))
    with pytest.raises(InvalidInput, match="does not exist"):
        store.add_campaign_location(campaign_id + 1, CountryLocation("LU"))
    with pytest.raises(InvalidInput, match="nor a country"):
        store.add_campaign_location(campaign_id, "LU")
    assert store.campaign(campaign_id).targeting == LEEDS


def test_locations_added_at_once_are_all_kept(store, database_url):
    campaign_id = store.add_campaign("Leeds", LEEDS, now=NOW)
    locations = [PointLocation(50.0 + i, 0.5, 2) for i in range(6)]
    # A store per thread, as separate processes would have: each call its own connection.
    threads = [
        threading.Thread(target=open_store(database_url).add_campaign_location, args=(campaign_id, location))
        for location in locations
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(store.campaign(campaign_id).targeting.locations) == {*LEEDS.locations, *locations}


def test_a_campaign_with_businesses_can_be_paused_and_given_a_location(store):
    campaign_id = store.add_campaign("Leeds", LEEDS, now=NOW)
    (run,) = import_runs({CELL: ["cafe"]}, areas_for(LEEDS))
    place = {"id": "p1", "area": CELL, "category": "cafe", "lat": 53.80, "lng": -1.56}
    store.write_import(run, RELEASE, places_table([place]), NOW)
    assert store.add_campaign_businesses(campaign_id, NOW) == (1, 1)
    # DuckDB refuses UPDATE ... RETURNING on a row another table's foreign key points at.
    store.set_campaign_status(campaign_id, "paused")
    store.add_campaign_location(campaign_id, CountryLocation("LU"))
    assert store.campaign(campaign_id).status == "paused"
    assert [r["id"] for r in store.campaign_results(campaign_id)] == ["p1"]


@pytest.mark.parametrize("name", ["Leeds\ncafes", "nul\x00", "tab\there"])
def test_a_campaign_name_with_control_characters_is_refused(store, name):
    with pytest.raises(InvalidInput, match="control characters"):
        store.add_campaign(name, LEEDS)
    assert store.campaigns() == []


def test_a_name_with_sql_in_it_is_kept_as_text(store):
    name = "O'Neill's; DROP TABLE campaigns; --"
    campaign_id = store.add_campaign(name, LEEDS)
    assert store.campaign(campaign_id).name == name


def test_a_place_name_is_kept_once_and_the_first_answer_stands(store):
    assert store.place_name("leeds") is None
    first = PlaceName("leeds", "Leeds, West Yorkshire, England", 53.7997, -1.5492, NOW)
    assert store.remember_place_name(first) == first
    later = PlaceName("leeds", "Leeds, Alabama", 33.5482, -86.5444, NOW + timedelta(hours=1))
    assert store.remember_place_name(later) == first
    assert store.place_name("leeds") == first
    assert query(store, "SELECT count(*) FROM place_names") == [(1,)]


def test_forgetting_a_failed_import_leaves_the_pair_missing(store):
    failed_at = NOW - timedelta(hours=IMPORT_HOURS)
    store.force_request([(CELL, "cafe")], failed_at)
    assert store.forget_failed_import(CELL, "cafe", NOW) == PlaceImport(CELL, "cafe", REQUESTED, 0, failed_at)
    assert imports_table(store) == {}
    assert store.forget_failed_import(CELL, "cafe", NOW) is None


def test_a_mark_on_its_way_or_a_real_release_is_not_forgotten(store):
    store.force_request([(CELL, "cafe")], NOW - timedelta(hours=IMPORT_HOURS) + timedelta(seconds=1))
    record_release(store, [(CELL, "pub")], NOW - timedelta(days=100))
    before = imports_table(store)
    assert store.forget_failed_import(CELL, "cafe", NOW) is None
    assert store.forget_failed_import(CELL, "pub", NOW) is None
    assert imports_table(store) == before
    assert before[(CELL, "pub")][0] == RELEASE


@pytest.mark.parametrize(
    ("area", "category", "message"),
    [("cell:53.4,-2", "cafe", "area"), ("country:XX", "cafe", "country"), (CELL, "cafe' OR 1=1 --", "category")],
)
def test_forgetting_checks_the_area_and_category(store, area, category, message):
    store.force_request([(CELL, "cafe")], NOW - timedelta(days=1))
    with pytest.raises(InvalidInput, match=message):
        store.forget_failed_import(area, category, NOW)
    assert len(imports_table(store)) == 1
