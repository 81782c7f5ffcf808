"""Bad input exits with code 2 and one message saying what is wrong and what is allowed, and writes nothing.

Most cases run in-process with click's runner (a ``nakodo`` process costs a second each); a few run the real
console script to show the same from the outside.
"""

from __future__ import annotations

from pathlib import Path
from shlex import split

import pytest

from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.store import open_store

ADD = ["campaign", "add", "--name", "Leeds cafes", "--category", "cafe"]
AT = ["--at", "53.8,-1.55"]
RADII = "'2', '5', '10', '25', '50', '100', '200'"
EXISTING = Targeting((PointLocation(53.8, -1.55, 10),), ("cafe",))

# Refused before the store is opened: no store file, no request to Nominatim.
REFUSED_UP_FRONT = [
    ([*ADD, "--at", "91,0", "--radius-km", "10"], "latitude 91.0 is out of range; allowed: -90 to 90"),
    ([*ADD, "--at", "53.8,-181", "--radius-km", "10"], "longitude -181.0 is out of range; allowed: -180 to 180"),
    ([*ADD, "--at", "north,west", "--radius-km", "10"], "--at 'north,west' is not allowed: use LAT,LNG"),
    ([*ADD, "--at", "53.8", "--radius-km", "10"], "--at '53.8' is not allowed: use LAT,LNG"),
    ([*ADD, "--at", "nan,-1.55", "--radius-km", "10"], "latitude nan is not a finite number; allowed: -90 to 90"),
    ([*ADD, "--at", "53.8,inf", "--radius-km", "10"], "longitude inf is not a finite number"),
    ([*ADD, *AT, "--radius-km", "3"], f"'3' is not one of {RADII}"),
    ([*ADD, *AT, "--radius-km", "ten"], f"'ten' is not one of {RADII}"),
    ([*ADD, *AT], "--radius-km is needed with --at; allowed: 2, 5, 10, 25, 50, 100, 200"),
    ([*ADD, "--country", "XX"], "country 'XX' is not known: use an ISO 3166-1 alpha-2 code"),
    ([*ADD, "--country", "FR", "--radius-km", "10"], "--radius-km goes with --near or --at"),
    ([*ADD, "--near", "Leeds", *AT, "--radius-km", "10"], "give exactly one location, not --near and --at"),
    (ADD, "give exactly one location, not none"),
    ([*ADD, "--near", "  ", "--radius-km", "10"], "place name '  ' is not allowed"),
    (["campaign", "add", "--name", "x", "--country", "FR"], "at least one business category is needed"),
    (["campaign", "add", "--name", "x", "--country", "FR", "--category", ""], "category '' is not allowed"),
    (["campaign", "add", "--name", "x", "--country", "FR", "--category", "Cafe"], "category 'Cafe' is not allowed"),
    (["campaign", "add", "--name", "x", "--country", "FR", "--category", "cafe,pub"], "'cafe,pub' is not allowed"),
    (
        ["campaign", "add", "--name", "x", "--country", "FR", "--category", "cafe'); DROP TABLE campaigns; --"],
        "use Overture's plain names, 1 to 64 characters of a-z, 0-9 and _",
    ),
    (["campaign", "add", "--name", "", "--country", "FR", "--category", "cafe"], "campaign name '' is not allowed"),
    (["campaign", "add", "--name", "a\nb", "--country", "FR", "--category", "cafe"], "without control characters"),
    (["campaign", "add", "--country", "FR", "--category", "cafe"], "Missing option '--name'"),
    (["campaign", "show", "first"], "'first' is not a valid integer"),
    (["results", "1", "--format", "geoparquet"], "--format geoparquet is binary: give --output FILE"),
    (["results", "1", "--output", "no/such/folder/x.csv"], "--output 'no/such/folder/x.csv' is not allowed"),
    (["results", "1", "--format", "xml"], "'xml' is not one of 'table', 'csv', 'geojson', 'geoparquet'"),
    (["imports", "retry", "cell:53.4,-2", "cafe"], "area 'cell:53.4,-2' is not allowed"),
    (["imports", "retry", "country:XX", "cafe"], "country 'XX' is not known"),
    (["imports", "retry", "cell:53.5,-2", "cafe;"], "category 'cafe;' is not allowed"),
    (["sync", "--wait", "-1"], "-1.0 is not in the range x>=0"),
]


def invoke_refused(nakodo_here, args: list[str], **variables: str) -> str:
    result = nakodo_here(*args, expect=2, **variables)
    # One message, on stderr, after the command's own usage line.
    assert result.stdout == ""
    assert result.stderr.startswith("Usage: nakodo ")
    return result.stderr


@pytest.mark.parametrize("database_url", ["duckdb"], indirect=True)
@pytest.mark.parametrize(("args", "message"), REFUSED_UP_FRONT)
def test_bad_input_is_refused_before_the_store_is_touched(nakodo_here, nominatim, database_url, args, message):
    assert message in invoke_refused(nakodo_here, args)
    assert not Path(database_url).exists()
    assert nominatim.requests == []


@pytest.mark.parametrize("database_url", ["duckdb"], indirect=True)
def test_a_bad_nominatim_url_is_refused_before_the_store_is_touched(nakodo_here, database_url):
    bad = {"NAKODO_NOMINATIM_URL": "ftp://nominatim.example.org"}
    message = invoke_refused(nakodo_here, [*ADD, "--near", "Leeds", "--radius-km", "10"], **bad)
    assert "NAKODO_NOMINATIM_URL 'ftp://nominatim.example.org' is not allowed: use http(s)://" in message
    assert not Path(database_url).exists()


@pytest.fixture
def campaign_id(environment, database_url) -> int:
    store = open_store(database_url)
    store.migrate()
    return store.add_campaign("Leeds", EXISTING)


def refused_after_a_look(tmp_path: Path, campaign_id: int) -> list[tuple[list[str], str, dict[str, str]]]:
    """Input only the store, Nominatim or the file system can refuse: (args, message, environment variables)."""
    unknown = str(campaign_id + 1)
    return [
        (["campaign", "show", unknown], f"campaign {unknown} does not exist", {}),
        (["campaign", "pause", unknown], "does not exist", {}),
        (["campaign", "resume", unknown], "does not exist", {}),
        (["campaign", "add-location", unknown, "--near", "Leeds", "--radius-km", "10"], "does not exist", {}),
        (["campaign", "add-location", str(campaign_id), *AT, "--radius-km", "10"], "already targets", {}),
        (["results", unknown], "does not exist", {}),
        (["sync", "--campaign", unknown], "does not exist", {}),
        ([*ADD, "--near", "Springfield", "--radius-km", "10"], "'Springfield' is ambiguous: it could be", {}),
        ([*ADD, "--near", "Atlantis", "--radius-km", "10"], "no place called 'Atlantis'", {}),
        (["sync"], "is not a folder", {"NAKODO_OVERTURE_ROOT": str(tmp_path / "nowhere")}),
        (["sync"], "DAGSTER_HOME", {"DAGSTER_HOME": str(tmp_path / "nowhere")}),
    ]


def test_input_refused_after_a_look_writes_nothing(nakodo_here, campaign_id, written, tmp_path):
    before = written()
    for args, message, variables in refused_after_a_look(tmp_path, campaign_id):
        assert message in invoke_refused(nakodo_here, args, **variables), args
    assert written() == before == {"campaigns": 1}


def test_sql_in_a_name_is_kept_as_text_and_harms_nothing(nakodo_here, database_url):
    name = "Bob's cafes'); DROP TABLE campaigns; --"
    nakodo_here("campaign", "add", "--name", name, "--country", "FR", "--category", "cafe")
    store = open_store(database_url)
    assert [c.name for c in store.campaigns()] == [name]
    assert name in nakodo_here("campaign", "list").output


def test_a_real_process_exits_2_with_one_message(nakodo, database_url, written):
    out_of_range = nakodo(*split("campaign add --name x --at 53.8,200 --radius-km 10 --category cafe"), expect=2)
    assert out_of_range.stdout == ""
    assert out_of_range.stderr.splitlines()[-1] == "Error: longitude 200.0 is out of range; allowed: -180 to 180"
    unknown = nakodo("results", "7", "--format", "csv", expect=2)
    assert unknown.stderr.splitlines()[-1].startswith("Error: campaign 7 does not exist")
    assert written() == {}
