"""A campaign file's rows turned into campaigns, or into every problem each row has: no store, no process."""

from __future__ import annotations

import geopandas as gpd
import pytest
from shapely.geometry import LineString, Point

from nakodo_dagster.cli.campaign_file import CSV, GEOPARQUET, Row, campaigns_of, read_campaign_file
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import CountryLocation, PointLocation
from nakodo_dagster.store import DEFAULT_ACCOUNT_ID


def row(number: int, **values: object) -> Row:
    return Row(number, {"name": "Leeds", "categories": "cafe", **values})


def test_rows_of_one_account_and_name_are_one_campaign_in_the_first_rows_order():
    read = campaigns_of(
        CSV,
        [
            row(2, lat="53.8", lng="-1.55", radius_km="25", categories="cafe; pub;"),
            row(3, country="ch", account="2", categories="bakery"),
            row(4, lat="53.4", lng="-2.2", radius_km="10", categories="cafe;pub"),
            row(5, lat="53.4", lng="-2.2", radius_km="10", account="2", categories="bakery"),
        ],
    )

    assert read.problems == {}
    assert [(c.campaign.account_id, c.campaign.name, c.rows) for c in read.campaigns] == [
        (DEFAULT_ACCOUNT_ID, "Leeds", (2, 4)),
        (2, "Leeds", (3, 5)),
    ]
    leeds, other = (c.campaign.targeting for c in read.campaigns)
    assert leeds.locations == (PointLocation(53.8, -1.55, 25), PointLocation(53.4, -2.2, 10))
    assert leeds.categories == ("cafe", "pub")
    assert other.locations == (CountryLocation("CH"), PointLocation(53.4, -2.2, 10))


def test_every_problem_of_every_row_is_kept():
    read = campaigns_of(
        CSV,
        [
            row(2, name=None, account="acme", lat="91", lng="0", radius_km="10", categories="Cafe"),
            row(3, lat="53.8", radius_km="10"),
            row(4, lat="53.8", lng="-1.55"),
            row(5, country="FR", radius_km="10"),
            row(6, lat="53.8", lng="-1.55", radius_km="10"),
            row(7, lat="53.8", lng="-1.55", radius_km="10"),
            row(8, country="FR", categories="pub"),
        ],
        # Row 2 alone is refused before it can join a campaign: rows 6 to 8 are Leeds of the default account.
    )

    assert read.problems == {
        2: [
            "campaign name '' is not allowed: use 1 to 200 characters of text, without control characters such as "
            "line breaks",
            "account id 'acme' is not allowed: use the whole number `account list` shows",
            "latitude 91.0 is out of range; allowed: -90 to 90",
            "category 'Cafe' is not allowed: use Overture's plain names, 1 to 64 characters of a-z, 0-9 and _ "
            "(e.g. 'cafe', 'italian_restaurant')",
        ],
        3: ["a point needs both lat and lng, in decimal degrees"],
        4: ["radius_km is needed with a point; allowed: 2, 5, 10, 25, 50, 100, 200"],
        5: ["give lat and lng with radius_km, or country, not both: a country is taken whole"],
        7: ["campaign 'Leeds' of account 1 has this location on line 6"],
        8: [
            "its categories (pub) are not those of line 6 (cafe): every row of campaign 'Leeds' of account 1 names "
            "the same"
        ],
    }
    assert [c.rows for c in read.campaigns] == [(6,)]
    assert read.accounts == {n: DEFAULT_ACCOUNT_ID for n in (3, 4, 5, 6, 7, 8)}


def test_a_csv_is_read_with_its_line_numbers_a_byte_order_mark_and_quoted_line_breaks(tmp_path):
    path = tmp_path / "campaigns.csv"
    path.write_text(
        '\ufeffname,country,categories\n"Two\nlines",FR,cafe\n\nSpain,ES,cafe,extra\nPortugal,PT,cafe\n',
        encoding="utf-8",
    )

    read = read_campaign_file(path)

    assert read.rows == 3
    assert read.problems == {
        3: [
            "campaign name 'Two\\nlines' is not allowed: use 1 to 200 characters of text, without control "
            "characters such as line breaks"
        ],
        5: ["1 values more than the header's 3 columns"],
    }
    assert [(c.campaign.name, c.rows) for c in read.campaigns] == [("Portugal", (6,))]


def test_a_geoparquet_row_takes_its_point_from_the_geometry_in_wgs84_and_whole_numbers_from_float_columns(tmp_path):
    frame = gpd.GeoDataFrame(
        {
            "name": ["Quito", "Belgium", "Road"],
            "account": [2, None, None],
            "radius_km": [200, None, 10],
            "country": [None, "BE", None],
            "categories": [["restaurant"], ["bakery", "cafe"], ["cafe"]],
        },
        geometry=[Point(-78.4678, -0.1807), None, LineString([(0, 0), (1, 1)])],
        crs="EPSG:4326",
    ).to_crs(3857)
    path = tmp_path / "campaigns.parquet"
    frame.to_parquet(path)

    read = read_campaign_file(path)

    assert read.format == GEOPARQUET
    assert read.problems == {
        3: ["geometry 'LineString' is not allowed: a Point (the centre, with radius_km), or none (with country)"]
    }
    quito, belgium = (c.campaign for c in read.campaigns)
    assert (quito.account_id, quito.targeting.categories) == (2, ("restaurant",))
    [centre] = quito.targeting.locations
    assert (round(centre.lat, 4), round(centre.lng, 4), centre.radius_km) == (-0.1807, -78.4678, 200)
    assert belgium.account_id == DEFAULT_ACCOUNT_ID
    assert belgium.targeting.locations == (CountryLocation("BE"),)
    assert belgium.targeting.categories == ("bakery", "cafe")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("typo.csv", "name,lat,lng,radius,categories\n", "column 'radius' is not known; allowed: name, account, lat"),
        ("no_name.csv", "country,categories\nFR,cafe\n", "has no column name; columns: name, account, lat"),
        ("empty.csv", "", "is empty: its first line names the columns"),
        ("latin1.csv", "name,country,categories\nZ\xfcrich,CH,cafe\n", "is not a CSV file of UTF-8 text"),
        ("list.geojson", "[]", "is not a FeatureCollection"),
        (
            "extra.geojson",
            '{"type": "FeatureCollection", "features": [{"type": "Feature", "properties": {"lat": 1}}]}',
            "property 'lat' is not known; allowed: name, account, radius_km",
        ),
        ("not.parquet", "hello", "is not GeoParquet"),
    ],
)
def test_a_file_that_is_not_a_campaign_file_is_one_error(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(InvalidInput, match=message):
        read_campaign_file(path)
