"""``nakodo campaign import FILE`` as an agency moving in runs it: a real process, both stores.

What lands is checked against the file read independently (the csv and json modules, pyarrow and shapely), and what
the store keeps of each campaign against placement's own areas, not the store's SQL.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import geopandas as gpd
import psycopg2
import pyarrow.parquet as pq
import pytest
import shapely
from shapely.geometry import Point

from nakodo_dagster.placement import CountryLocation, Location, PointLocation, areas_for
from nakodo_dagster.store import DEFAULT_ACCOUNT_ID, open_store
from nakodo_dagster.store.campaigns import CAMPAIGN_TABLES

# A campaign as compared here: its account and name, then its locations in order and its categories.
Expected = dict[tuple[int, str], tuple[list[Location], tuple[str, ...]]]


def landed(database_url: str) -> Expected:
    """Every campaign in the store, as Expected, and checked to be active."""
    campaigns = open_store(database_url).campaigns()
    assert {c.status for c in campaigns} <= {"active"}
    return {(c.account_id, c.name): (list(c.targeting.locations), c.targeting.categories) for c in campaigns}


def kept_rows(database_url: str) -> dict[str, int]:
    """Rows of every table a campaign's creation writes, and the last noted change of the needs."""
    store = open_store(database_url)
    store.migrate()
    tables = (*CAMPAIGN_TABLES, "needs_changes")
    return store._transact(lambda tx: {t: tx.rows(f"SELECT count(*) FROM {t}")[0][0] for t in tables})


def assert_needs_kept(database_url: str) -> None:
    """Each campaign keeps the areas placement works out for it, and needed_pairs counts each pair's campaigns."""
    store = open_store(database_url)
    campaigns = store.campaigns()
    expected_pairs = Counter(
        (area, category) for c in campaigns for area in areas_for(c.targeting) for category in c.targeting.categories
    )

    def read(tx):
        areas = tx.rows("SELECT campaign_id, area FROM campaign_areas")
        pairs = tx.rows("SELECT area, category, campaigns FROM needed_pairs WHERE campaigns > 0")
        [(needed,)] = tx.rows("SELECT pairs FROM coverage_counts WHERE state = 'needed'")
        return areas, pairs, needed

    areas, pairs, needed = store._transact(read)
    assert sorted(areas) == sorted((c.id, area) for c in campaigns for area in areas_for(c.targeting))
    assert {(area, category): n for area, category, n in pairs} == dict(expected_pairs)
    assert needed == len(expected_pairs)


def add_account(nakodo_here, name: str, plan: str) -> int:
    return int(nakodo_here("account", "add", "--name", name, "--plan", plan).stdout.splitlines()[-1])


def csv_expected(path: Path) -> Expected:
    """The campaigns of a CSV, read with the csv module: lines of one account and name are one campaign."""
    expected: Expected = {}
    with path.open(newline="") as file:
        for row in csv.DictReader(file):
            if row["country"]:
                location = CountryLocation(row["country"].upper())
            else:
                location = PointLocation(float(row["lat"]), float(row["lng"]), int(row["radius_km"]))
            key = (int(row["account"] or DEFAULT_ACCOUNT_ID), row["name"])
            expected.setdefault(key, ([], tuple(row["categories"].split(";"))))[0].append(location)
    return expected


def test_a_csv_lands_exactly_its_campaigns_in_the_files_order(nakodo, nakodo_here, database_url, tmp_path):
    acme = add_account(nakodo_here, "Acme", "pro")
    path = tmp_path / "campaigns.csv"
    path.write_text(
        "name,account,lat,lng,radius_km,country,categories\n"
        "Leeds cafes and pubs,,53.7997,-1.5492,25,,cafe;pub\n"
        f"Swiss bakeries,{acme},,,,ch,bakery\n"
        "Leeds cafes and pubs,,53.4808,-2.2426,10,,cafe;pub\n"
        f'"Bob\'s ""best"", cafes",{acme},-17.0,179.97,10,,cafe\n'
        f"Leeds cafes and pubs,{acme},53.8,-1.55,2,,pub\n"
    )

    done = nakodo("campaign", "import", str(path))

    assert done.stdout.splitlines()[-1].startswith("Imported 4 campaigns for 2 accounts from ")
    expected = csv_expected(path)
    assert landed(database_url) == expected
    # Ids follow the file: each campaign's first line.
    assert [(c.account_id, c.name) for c in open_store(database_url).campaigns()] == list(expected)
    assert_needs_kept(database_url)


def test_a_geojson_lands_exactly_its_features_campaigns(nakodo, nakodo_here, database_url, tmp_path):
    acme = add_account(nakodo_here, "Acme", "pro")
    features = [
        {
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [2.3522, 48.8566]},
            "properties": {"name": "Paris", "account": acme, "radius_km": 50, "categories": ["bakery", "cafe"]},
        },
        {"type": "Feature", "geometry": None, "properties": {"name": "Fiji", "country": "FJ", "categories": "hotel"}},
        {
            "type": "Feature",
            "geometry": {"type": "Point", "coordinates": [4.8357, 45.764]},
            "properties": {"name": "Paris", "account": acme, "radius_km": 5, "categories": ["bakery", "cafe"]},
        },
    ]
    path = tmp_path / "campaigns.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))

    nakodo("campaign", "import", str(path))

    expected: Expected = {}
    for feature in json.loads(path.read_text())["features"]:
        given = feature["properties"]
        if feature["geometry"] is None:
            location = CountryLocation(given["country"])
        else:
            lng, lat = feature["geometry"]["coordinates"]
            location = PointLocation(lat, lng, given["radius_km"])
        categories = given["categories"] if isinstance(given["categories"], list) else given["categories"].split(";")
        key = (given.get("account", DEFAULT_ACCOUNT_ID), given["name"])
        expected.setdefault(key, ([], tuple(categories)))[0].append(location)
    assert landed(database_url) == expected
    assert_needs_kept(database_url)


def test_a_geoparquet_lands_exactly_its_rows_campaigns(nakodo, nakodo_here, database_url, tmp_path):
    acme = add_account(nakodo_here, "Acme", "pro")
    frame = gpd.GeoDataFrame(
        {
            "name": ["Leeds", "Belgium", "Leeds", "Quito"],
            "account": [acme, None, acme, acme],
            "radius_km": [25, None, 100, 200],
            "country": [None, "BE", None, None],
            "categories": [["cafe", "pub"], ["bakery"], ["cafe", "pub"], ["restaurant"]],
        },
        geometry=[Point(-1.5492, 53.7997), None, Point(-2.2426, 53.4808), Point(-78.4678, -0.1807)],
        crs="EPSG:4326",
    )
    path = tmp_path / "campaigns.parquet"
    frame.to_parquet(path)

    nakodo("campaign", "import", str(path))

    expected: Expected = {}
    for row in pq.read_table(path).to_pylist():
        geometry = shapely.from_wkb(row["geometry"]) if row["geometry"] else None
        if geometry is None:
            location = CountryLocation(row["country"])
        else:
            location = PointLocation(geometry.y, geometry.x, int(row["radius_km"]))
        key = (int(row["account"]) if row["account"] is not None else DEFAULT_ACCOUNT_ID, row["name"])
        expected.setdefault(key, ([], tuple(row["categories"])))[0].append(location)
    assert landed(database_url) == expected
    assert_needs_kept(database_url)


BAD_LINES = {
    2: ("Leeds,,53.8,-1.55,30,,cafe", "radius 30 km is not offered; allowed: 2, 5, 10, 25, 50, 100, 200"),
    3: ("Leeds,,53.8,-1.55,25,,Cafe", "category 'Cafe' is not allowed: use Overture's plain names"),
    4: ("Paris,,48.85,2.35,10,FR,cafe", "give lat and lng with radius_km, or country, not both"),
    5: ("Nowhere,,,,,XX,cafe", "country 'XX' is not known: use an ISO 3166-1 alpha-2 code"),
    6: ("Ghost,99,,,,FR,cafe", "account 99 does not exist; `nakodo account list` shows the accounts"),
    7: ("Pole,,95,0,10,,cafe", "latitude 95.0 is out of range; allowed: -90 to 90"),
    9: ("Empty,,,,,,cafe", "no location: give lat and lng with radius_km (km: 2, 5, 10, 25, 50, 100, 200), or country"),
    10: ("No kinds,,,,,FR,", "at least one business category is needed"),
    11: ("Leeds pubs,,53.8,-1.55,ten,,pub", "radius 'ten' km is not offered; allowed: 2, 5, 10, 25, 50, 100, 200"),
}


def test_a_file_with_bad_lines_names_each_and_writes_nothing(nakodo, nakodo_here, database_url, tmp_path):
    nakodo_here("campaign", "add", "--name", "Before", "--country", "FR", "--category", "cafe")
    before = kept_rows(database_url)
    lines = dict(sorted({8: "Good,,53.8,-1.55,10,,cafe", **{n: line for n, (line, _) in BAD_LINES.items()}}.items()))
    assert list(lines) == list(range(2, 12)), "every line after the header, in order"
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(["name,account,lat,lng,radius_km,country,categories", *lines.values()]) + "\n")

    refused = nakodo("campaign", "import", str(path), expect=2)

    assert refused.stdout == ""
    errors = refused.stderr.split("Error: ", 1)[1].splitlines()
    assert errors[0] == f"{path}: {len(BAD_LINES)} lines of {len(lines)} refused, nothing written:"
    assert [line.split(":")[0].strip() for line in errors[1:]] == [f"line {n}" for n in BAD_LINES]
    for error, (_, message) in zip(errors[1:], BAD_LINES.values(), strict=True):
        assert message in error
    assert kept_rows(database_url) == before
    assert [c.name for c in open_store(database_url).campaigns()] == ["Before"]


def test_bad_features_are_named_by_their_place_in_the_collection(nakodo, database_url, tmp_path):
    good = {"type": "Feature", "geometry": None, "properties": {"name": "FR", "country": "FR", "categories": "cafe"}}
    line = {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}
    features = [
        good,
        {**good, "geometry": line, "properties": {"name": "Road", "radius_km": 10, "categories": ["cafe"]}},
        {**good, "properties": {"name": "Twice", "country": "DE", "categories": ["cafe", "pub"]}},
        {**good, "properties": {"name": "Twice", "country": "DE", "categories": ["cafe", "pub"]}},
        {**good, "properties": {"name": "Twice", "country": "AT", "categories": ["cafe"]}},
    ]
    path = tmp_path / "bad.geojson"
    path.write_text(json.dumps({"type": "FeatureCollection", "features": features}))

    refused = nakodo("campaign", "import", str(path), expect=2)

    errors = refused.stderr.split("Error: ", 1)[1].splitlines()
    assert errors[0].endswith("3 features of 5 refused, nothing written:")
    assert errors[1].startswith(
        "  feature 2: geometry 'LineString' is not allowed: a Point (the centre, with radius_km)"
    )
    assert errors[2] == "  feature 4: campaign 'Twice' of account 1 has this location on feature 3"
    assert errors[3].startswith("  feature 5: its categories (cafe) are not those of feature 3 (cafe, pub)")
    assert open_store(database_url).campaigns() == []


def test_a_file_is_refused_whole_when_it_is_not_a_campaign_file(nakodo_here, tmp_path):
    (tmp_path / "typo.csv").write_text("name,acount,country,categories\nX,2,FR,cafe\n")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "broken.geojson").write_text("{")
    (tmp_path / "empty.csv").write_text("name,country,categories\n")
    for name, message in [
        ("typo.csv", "column 'acount' is not known; allowed: name, account, lat, lng, radius_km, country, categories"),
        ("notes.txt", "is not a campaign file by its name: use .csv, .geojson (or .json) or .parquet"),
        ("broken.geojson", "is not GeoJSON"),
        ("empty.csv", "has no campaigns: one line per location of a campaign"),
    ]:
        assert message in nakodo_here("campaign", "import", str(tmp_path / name), expect=2).stderr


def test_plan_limits_count_the_accounts_campaigns_and_the_files_before_each_line(
    nakodo, nakodo_here, database_url, tmp_path
):
    acme = add_account(nakodo_here, "Acme", "starter")
    had = [
        ["--at", "53.8,-1.55", "--radius-km", "10"],
        ["--at", "51.5,-0.12", "--radius-km", "10"],
        ["--country", "FR"],
    ]
    for number, where in enumerate(had):
        nakodo_here("campaign", "add", "--name", f"had {number}", *where, "--category", "cafe", "--account", str(acme))
    before = kept_rows(database_url)
    lines = [
        f"fourth,{acme},48.85,2.35,10,,cafe",
        f"Germany,{acme},,,,DE,cafe",
        f"fifth,{acme},45.76,4.84,10,,cafe",
        f"sixth,{acme},43.3,5.37,10,,cafe",
        "the default account's,,43.3,5.37,200,,cafe",
    ]
    path = tmp_path / "acme.csv"
    path.write_text("\n".join(["name,account,lat,lng,radius_km,country,categories", *lines]) + "\n")

    refused = nakodo("campaign", "import", str(path), expect=2)

    errors = refused.stderr.split("Error: ", 1)[1].splitlines()
    assert errors[1:] == [
        "  line 3: plan starter allows 1 country; this campaign needs 1 (DE), 0 are left "
        f"(account {acme}, 'Acme'; `nakodo account show {acme}`)",
        "  line 5: plan starter allows 5 active campaigns; this campaign needs 1, 0 are left "
        f"(account {acme}, 'Acme'; `nakodo account show {acme}`)",
    ]
    assert kept_rows(database_url) == before

    path.write_text("\n".join(["name,account,lat,lng,radius_km,country,categories", lines[0], *lines[2:3], lines[4]]))
    nakodo("campaign", "import", str(path))
    usage = open_store(database_url).account_usage(acme).usage
    assert (usage.campaigns, usage.countries) == (5, 1)
    assert_needs_kept(database_url)


def test_check_tells_whether_a_file_fits_and_writes_nothing(nakodo, database_url, tmp_path):
    path = tmp_path / "one.csv"
    path.write_text("name,country,categories\nFrance,FR,cafe;bakery\n")
    before = kept_rows(database_url)

    checked = nakodo("campaign", "import", "--check", str(path))

    assert checked.stdout.strip() == f"{path}: 1 campaign for 1 account, all fit; nothing written (--check)"
    assert kept_rows(database_url) == before


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_planner_statistics_are_taken_of_the_tables_an_import_wrote(nakodo, database_url, tmp_path):
    path = tmp_path / "campaigns.csv"
    path.write_text(
        "name,lat,lng,radius_km,categories\n"
        + "".join(f"campaign {n},{40 + n / 10},{n / 10},50,cafe;pub\n" for n in range(40))
    )
    statistics = (
        "SELECT c.relname, c.reltuples, s.last_analyze IS NOT NULL FROM pg_class AS c "
        "JOIN pg_stat_user_tables AS s ON s.relid = c.oid WHERE c.relname = ANY(%s) ORDER BY c.relname"
    )
    nakodo("campaign", "list")  # the store, migrated and empty

    with psycopg2.connect(database_url) as connection, connection.cursor() as cursor:
        cursor.execute(statistics, (list(CAMPAIGN_TABLES),))
        assert [analyzed for _, _, analyzed in cursor.fetchall()] == [False] * len(CAMPAIGN_TABLES)

    nakodo("campaign", "import", str(path))

    with psycopg2.connect(database_url) as connection, connection.cursor() as cursor:
        cursor.execute(statistics, (list(CAMPAIGN_TABLES),))
        taken = {table: (rows, analyzed) for table, rows, analyzed in cursor.fetchall()}
        counted = {}
        for table in CAMPAIGN_TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            counted[table] = (cursor.fetchone()[0], True)
    assert taken == counted
    assert counted["campaigns"][0] == 40 and counted["campaign_areas"][0] > 40
