"""The placement policy as data: no database, no Dagster, no clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from geographiclib.geodesic import Geodesic
from hypothesis import given, settings
from hypothesis import strategies as st

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    BLOCK_DEGREES,
    CELL_DEGREES,
    FRESH_DAYS,
    IMPORT_HOURS,
    IMPORT_WAIT_HOURS,
    LOST_IMPORT,
    RADII_KM,
    REQUESTED,
    RETRY_DAYS,
    SEARCH_AGAIN_MINUTES,
    SEARCH_WINDOW_HOURS,
    CountryLocation,
    Cutoffs,
    ImportRun,
    PlaceImport,
    PointLocation,
    Targeting,
    areas_for,
    campaigns_needs,
    cell,
    cell_containing,
    cells_around,
    import_needs,
    import_runs,
    last_move_at,
    parse_area_key,
    retry_allowed_at,
    rolled_out,
    search_due,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
latitudes = st.floats(min_value=-90, max_value=90, allow_nan=False)
longitudes = st.floats(min_value=-180, max_value=180, allow_nan=False)
radii = st.sampled_from(RADII_KM)


def hours_ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


def row(area: str, category: str, release: str, at: datetime) -> PlaceImport:
    return PlaceImport(area, category, release, 0 if release == REQUESTED else 12, at)


def keys(areas) -> list[str]:
    return [a.key for a in areas]


# --- the seeds' tests -----------------------------------------------------------------------------------


def test_cells_wrap_across_the_antimeridian():
    found = keys(cells_around(-17, 179.97, 10))
    assert "cell:-17.5,179.5" in found
    assert "cell:-17.5,-180" in found
    assert "cell:-17.5,180" not in found


def test_leeds_and_headingley_share_a_cell():
    assert cell_containing(53.7997, -1.5492).key == "cell:53.5,-2"
    assert cell_containing(53.8194, -1.5826).key == "cell:53.5,-2"


def test_a_country_is_one_area_with_its_code():
    areas = areas_for(Targeting((CountryLocation("FR"),), ("bakery",)))
    assert list(areas) == ["country:FR"]
    assert areas["country:FR"].country_code == "FR"


def test_locations_merge_by_key():
    leeds = PointLocation(53.7997, -1.5492, 10)
    headingley = PointLocation(53.8194, -1.5826, 10)
    merged = areas_for(Targeting((leeds, headingley, CountryLocation("FR")), ("pub",)))
    separate = set(keys(cells_around(53.7997, -1.5492, 10))) | set(keys(cells_around(53.8194, -1.5826, 10)))
    assert set(merged) == separate | {"country:FR"}


def test_timeline_asked_failed_fresh():
    a, b = "cell:53.5,-2", "cell:53.5,-1.5"
    areas = {k: parse_area_key(k) for k in (a, b)}

    nothing = import_needs(areas, ["pub", "cafe"], [], NOW)
    assert nothing.missing == {a: ["pub", "cafe"], b: ["pub", "cafe"]}
    assert nothing.coming == set()
    assert nothing.arrived_at is None

    # Pubs in, cafes asked for an hour ago: wait, and ask for nothing more.
    asked = import_needs(
        areas,
        ["pub", "cafe"],
        [
            row(a, "pub", "2026-11-18.0", hours_ago(2)),
            row(b, "pub", "2026-11-18.0", hours_ago(3)),
            row(a, "cafe", REQUESTED, hours_ago(1)),
            row(b, "cafe", REQUESTED, hours_ago(1)),
        ],
        NOW,
    )
    assert asked.missing == {}
    assert asked.coming == {a, b}
    assert asked.arrived_at == hours_ago(2)

    # The cafes never came: not asked for again, nor waited on, for a week.
    failed_rows = [
        row(a, "pub", "2026-11-18.0", hours_ago(30)),
        row(a, "cafe", REQUESTED, hours_ago(IMPORT_HOURS + 1)),
    ]
    failed = import_needs({a: areas[a]}, ["pub", "cafe"], failed_rows, NOW)
    assert failed.coming == set()
    assert failed.missing.get(a) is None

    # After the week the failed pair is asked for again; the pub release is still fresh.
    week_rows = [
        row(a, "pub", "2026-11-18.0", hours_ago(30)),
        row(a, "cafe", REQUESTED, NOW - timedelta(days=RETRY_DAYS)),
    ]
    assert import_needs({a: areas[a]}, ["pub", "cafe"], week_rows, NOW).missing == {a: ["cafe"]}

    # A release is fresh for 35 days, then asked for again.
    stale = [row(a, "pub", "2026-10-15.0", NOW - timedelta(days=FRESH_DAYS))]
    assert import_needs({a: areas[a]}, ["pub"], stale, NOW).missing == {a: ["pub"]}
    fresh = [row(a, "pub", "2026-10-15.0", NOW - timedelta(days=FRESH_DAYS) + timedelta(seconds=1))]
    assert import_needs({a: areas[a]}, ["pub"], fresh, NOW).missing == {}


def test_a_recorded_failure_reads_as_failed_at_once_and_for_exactly_the_week_after_it():
    a = "cell:53.5,-2"
    failed_at = hours_ago(0.1)
    failed = PlaceImport(a, "cafe", REQUESTED, 0, failed_at, "file part-00003.parquet is unreadable")
    lost = PlaceImport(a, "cafe", REQUESTED, 0, failed_at)
    end = retry_allowed_at(failed_at)
    assert end == failed_at + timedelta(days=RETRY_DAYS)

    assert Cutoffs.at(NOW).row_state(failed) == "failed", "nobody waits on a pair known to have failed"
    assert Cutoffs.at(NOW).row_state(lost) == "coming", "without a recorded failure the mark is on its way"
    # The old back-dating ended the block 6 hours early: the block now runs to the week's last moment.
    assert Cutoffs.at(end - timedelta(hours=IMPORT_HOURS)).row_state(failed) == "failed"
    assert Cutoffs.at(end - timedelta(microseconds=1)).row_state(failed) == "failed"
    assert Cutoffs.at(end).row_state(failed) == "missing"


def test_import_needs_gives_each_failed_area_and_why():
    a, b, c = "cell:53.5,-2", "cell:53.5,-1.5", "cell:53,-2"
    areas = {k: parse_area_key(k) for k in (a, b, c)}
    rows = [
        PlaceImport(a, "cafe", REQUESTED, 0, hours_ago(1), "file part-00003.parquet is unreadable"),
        row(a, "pub", "2026-11-18.0", hours_ago(2)),
        # A mark lost without a word: failed once its 6 hours are over.
        row(b, "cafe", REQUESTED, hours_ago(IMPORT_HOURS + 1)),
        row(b, "pub", "2026-11-18.0", hours_ago(2)),
        # An area with a pair failed and one on its way is on its way.
        PlaceImport(c, "cafe", REQUESTED, 0, hours_ago(1), "timed out"),
        row(c, "pub", REQUESTED, hours_ago(1)),
    ]
    needs = import_needs(areas, ["cafe", "pub"], rows, NOW)
    assert needs.failed == {a: "file part-00003.parquet is unreadable", b: LOST_IMPORT}
    assert needs.coming == {c}
    assert needs.missing == {}


def test_a_pair_rolled_out_to_a_newer_release_is_missing_whatever_its_age():
    a = cell(53.5, -2).key
    old, new = "2026-10-15.0", "2026-11-18.0"
    asked = PlaceImport(a, "cafe", old, 12, hours_ago(1), roll_out=new)
    assert rolled_out(old, new) and Cutoffs.at(NOW).row_state(asked) == "missing"
    assert import_needs([cell(53.5, -2)], ["cafe"], [asked], NOW).missing == {a: ["cafe"]}
    # On the release it was asked to move to, it has moved; a mark is the import under way, the request ended.
    moved = PlaceImport(a, "cafe", new, 12, hours_ago(1), roll_out=new)
    assert not rolled_out(new, new) and Cutoffs.at(NOW).row_state(moved) == "fresh"
    assert not rolled_out(REQUESTED, new)
    assert Cutoffs.at(NOW).row_state(PlaceImport(a, "cafe", REQUESTED, 0, hours_ago(1), roll_out=new)) == "coming"
    assert not rolled_out(old, None)


def test_the_last_pair_moves_fresh_days_after_the_newest_older_load_never_before_now():
    assert last_move_at(None, NOW) is None
    assert last_move_at(NOW - timedelta(days=5), NOW) == NOW + timedelta(days=FRESH_DAYS - 5)
    assert last_move_at(NOW - timedelta(days=FRESH_DAYS + 3), NOW) == NOW


def test_arrived_at_ignores_marks():
    a = "cell:53.5,-2"
    rows = [row(a, "pub", "2026-11-18.0", hours_ago(5)), row(a, "cafe", REQUESTED, hours_ago(1))]
    assert import_needs([parse_area_key(a)], ["pub", "cafe"], rows, NOW).arrived_at == hours_ago(5)


def test_block_invariants_for_a_200_km_campaign():
    cells = cells_around(53.8, -1.55, 200)
    areas = {c.key: c for c in cells}
    runs = import_runs({c.key: ["pub", "cafe"] for c in cells}, areas)
    blocks = [r for r in runs if r.country_code is None]
    assert sorted(k for r in blocks for k in r.areas) == sorted(areas)
    for block in blocks:
        west, south, east, north = block.bbox
        assert east - west <= BLOCK_DEGREES and north - south <= BLOCK_DEGREES
    assert len(runs) < len(cells) / 4, "one run per block, never one run per cell"


def test_a_block_carries_the_union_of_categories_sorted_and_only_its_reserved_pairs():
    a, b = "cell:53.5,-2", "cell:53.5,-1.5"
    [run] = import_runs({a: ["pub"], b: ["cafe", "bakery"]}, {})
    assert run.categories == ("bakery", "cafe", "pub")
    assert set(run.pairs) == {(a, "pub"), (b, "cafe"), (b, "bakery")}


def test_a_country_is_a_run_of_its_own():
    cells = {c.key: c for c in cells_around(46.2, 6.1, 25)}
    areas = {**cells, "country:CH": parse_area_key("country:CH")}
    runs = import_runs({k: ["pub"] for k in areas}, areas)
    countries = [r for r in runs if r.country_code]
    assert [(r.areas, r.country_code) for r in countries] == [(("country:CH",), "CH")]


def test_run_key_ignores_category_order():
    a = "cell:53.5,-2"
    [one] = import_runs({a: ["pub", "cafe"]}, {})
    [two] = import_runs({a: ["cafe", "pub"]}, {})
    [other] = import_runs({a: ["cafe"]}, {})
    assert one.key == two.key != other.key


def test_run_payload_round_trips():
    [run] = import_runs({"cell:-17.5,179.5": ["cafe"], "cell:-17.5,179": ["pub"]}, {})
    assert ImportRun.from_payload(run.payload()) == run


# --- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lat", "lng", "radius", "says"),
    [
        (90.5, 0, 10, "latitude 90.5 is out of range"),
        (0, -180.1, 10, "longitude -180.1 is out of range"),
        (math.nan, 0, 10, "not a finite number"),
        (0, math.inf, 10, "not a finite number"),
        ("53", 0, 10, "not a finite number"),
        (0, 0, 3, "radius 3 km is not offered; allowed: 2, 5, 10, 25, 50, 100, 200"),
        (0, 0, True, "is not offered"),
    ],
)
def test_bad_points_say_what_is_allowed(lat, lng, radius, says):
    with pytest.raises(InvalidInput, match=says):
        PointLocation(lat, lng, radius)


@pytest.mark.parametrize(
    "categories", [(), ("Cafe",), ("cafe; DROP TABLE places",), ("",), ("café",), ("a" * 65,), (None,)]
)
def test_bad_categories(categories):
    with pytest.raises(InvalidInput, match="categor"):
        Targeting((PointLocation(0, 0, 10),), categories)


@pytest.mark.parametrize("code", ["XX", "fr", "FRA", "", "F"])
def test_unknown_country(code):
    with pytest.raises(InvalidInput, match="ISO 3166-1 alpha-2"):
        CountryLocation(code)


def test_no_location():
    with pytest.raises(InvalidInput, match="at least one location"):
        Targeting((), ("cafe",))


@pytest.mark.parametrize(
    "key",
    ["cell:53.5,-2.0", "cell:-0,5", "cell:53.25,-2", "cell:90,0", "cell:0,180", "place:1", "country:XX", "x"],
)
def test_area_keys_must_be_canonical(key):
    with pytest.raises(InvalidInput, match=r"is not (allowed|known)"):
        parse_area_key(key)


# --- properties over the whole globe and every radius ----------------------------------------------------


@given(latitudes, longitudes, radii)
def test_every_key_round_trips_and_stays_on_the_globe(lat, lng, radius):
    for area in cells_around(lat, lng, radius):
        assert parse_area_key(area.key) == area
        west, south, east, north = area.bbox
        assert -90 <= south < 90 and -180 <= west < 180
        assert north - south == CELL_DEGREES and east - west == CELL_DEGREES
        numbers = area.key.removeprefix("cell:").split(",")
        assert all(n != "-0" and not n.endswith(".0") for n in numbers)


@given(latitudes, longitudes, radii)
def test_cells_are_distinct(lat, lng, radius):
    found = keys(cells_around(lat, lng, radius))
    assert len(found) == len(set(found))


@given(latitudes, longitudes)
def test_the_centre_is_covered(lat, lng):
    assert cell_containing(lat, lng).key in keys(cells_around(lat, lng, min(RADII_KM)))


@settings(max_examples=200)
@given(
    st.floats(min_value=-60, max_value=60),
    longitudes,
    radii,
    st.floats(min_value=0, max_value=360),
    st.floats(min_value=0, max_value=0.99),
)
def test_cells_cover_the_geodesic_circle(lat, lng, radius, bearing, fraction):
    # The seed's box is 111.32 km a degree; WGS84 degrees differ by under 1 % away from the poles.
    point = Geodesic.WGS84.Direct(lat, lng, bearing, fraction * radius * 1000)
    assert cell_containing(point["lat2"], point["lon2"]).key in keys(cells_around(lat, lng, radius))


@given(
    st.dictionaries(
        st.tuples(st.integers(-180, 179), st.integers(-360, 359)),
        st.sets(st.sampled_from(["pub", "cafe", "bakery", "bar"]), min_size=1),
        min_size=1,
        max_size=60,
    )
)
def test_every_missing_cell_is_in_exactly_one_small_run(cells):
    missing = {
        cell(row * CELL_DEGREES, column * CELL_DEGREES).key: sorted(cats) for (row, column), cats in cells.items()
    }
    runs = import_runs(missing, {})
    assert sorted(k for r in runs for k in r.areas) == sorted(missing)
    assert sorted(p for r in runs for p in r.pairs) == sorted((k, c) for k, cs in missing.items() for c in cs)
    for run in runs:
        west, south, east, north = run.bbox
        assert 0 < east - west <= BLOCK_DEGREES and 0 < north - south <= BLOCK_DEGREES
        assert list(run.categories) == sorted(set(run.categories))
        for key in run.areas:
            cw, cs, ce, cn = parse_area_key(key).bbox
            assert west <= cw and ce <= east and south <= cs and cn <= north
    again = import_runs({k: list(reversed(v)) for k, v in reversed(missing.items())}, {})
    assert [r.key for r in again] == [r.key for r in runs]


# --- several campaigns and the search's rhythm -----------------------------------------------------------


def test_campaigns_needs_merge_one_block_for_two_campaigns():
    pubs = Targeting((PointLocation(53.7997, -1.5492, 10),), ("pub",))
    cafes = Targeting((PointLocation(53.8194, -1.5826, 10),), ("cafe", "pub"))
    leeds = "cell:53.5,-2"
    rows = [row(leeds, "pub", "2026-11-18.0", hours_ago(3))]

    areas, needs = campaigns_needs([pubs, cafes], rows, NOW)

    assert set(areas) == set(areas_for(pubs)) | set(areas_for(cafes))
    assert needs.missing[leeds] == ["cafe"]
    assert needs.arrived_at == hours_ago(3)
    runs = import_runs(needs.missing, areas)
    assert sum(1 for r in runs for a in r.areas if a == leeds) == 1


def test_search_runs_first_thing_each_day():
    assert search_due(None, None, 0, None, NOW) == "first search of the day"
    yesterday = NOW - timedelta(hours=SEARCH_WINDOW_HOURS)
    assert search_due(yesterday, hours_ago(1), 0, None, NOW) == "first search of the day"


def test_search_comes_back_every_two_minutes_while_imports_are_pending():
    started = hours_ago(1)
    just_now = NOW - timedelta(minutes=SEARCH_AGAIN_MINUTES) + timedelta(seconds=1)
    assert search_due(started, just_now, 3, None, NOW) is None
    assert (
        search_due(started, NOW - timedelta(minutes=SEARCH_AGAIN_MINUTES), 3, None, NOW) == "3 areas still on their way"
    )
    assert search_due(started, hours_ago(1), 0, None, NOW) is None, "nothing pending: no need to come back"


def test_search_stops_waiting_for_the_day_after_six_hours():
    started = NOW - timedelta(hours=IMPORT_WAIT_HOURS)
    assert search_due(started, hours_ago(1), 3, None, NOW) is None


def test_search_runs_again_when_new_places_land():
    assert search_due(hours_ago(8), hours_ago(1), 0, hours_ago(0.5), NOW) == "new places landed since the last search"
    assert search_due(hours_ago(8), hours_ago(1), 0, hours_ago(2), NOW) is None


@pytest.mark.parametrize(
    "change",
    [
        {"bbox": [float("nan"), 53.5, -1.0, 54.0]},
        {"bbox": [-20, 40, 20, 60]},
        {"country_code": "GB"},
        {"categories": ["cafe", "pub; DROP TABLE places"]},
        {"areas": ["cell:53.5,-2", "place:1"]},
        {"pairs": [["cell:53.5,-2", "bar"]]},
        {"areas": ["cell:53.5,-2", "cell:20,20"], "pairs": [["cell:53.5,-2", "pub"], ["cell:20,20", "pub"]]},
    ],
)
def test_a_run_payload_must_be_the_run_its_pairs_make(change):
    [run] = import_runs({"cell:53.5,-2": ["cafe", "pub"], "cell:53.5,-1.5": ["pub"]}, {})
    with pytest.raises(InvalidInput):
        ImportRun.from_payload({**run.payload(), **change})
