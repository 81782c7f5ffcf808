"""A user's whole path through ``nakodo``: a campaign by place name, a headless sync, its businesses as files.

The businesses are checked against an independent reading: the release row by row with pyarrow
(``overture_helpers.expected_rows``) and WGS84 geodesics from geographiclib, not the project's SQL.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from shlex import split

import geopandas as gpd
from geographiclib.geodesic import Geodesic
from overture_helpers import CURRENT as RELEASE

from bench.independent import EDGE_BAND, expected_rows
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.store import open_store

LEEDS = PointLocation(53.7997, -1.5492, 25)
CAMPAIGN = Targeting((LEEDS, CountryLocation("CH")), ("cafe", "pub"))


def independent_businesses(root: Path, targeting: Targeting) -> tuple[dict[str, float | None], set[str]]:
    """({id: geodesic km to the point, or None for a country match} surely in, ids too near the edge to call)."""
    areas = areas_for(targeting)
    runs = import_runs({key: list(targeting.categories) for key in areas}, areas)
    inside: dict[str, float | None] = {}
    edge: set[str] = set()
    for place_id, _, _, lat, lng, *_, area in (row for run in runs for row in expected_rows(root, RELEASE, run)):
        if area.startswith("country:"):
            inside[place_id] = None
            continue
        km = Geodesic.WGS84.Inverse(LEEDS.lat, LEEDS.lng, lat, lng)["s12"] / 1000
        if km <= LEEDS.radius_km * (1 - EDGE_BAND):
            inside[place_id] = km
        elif km <= LEEDS.radius_km * (1 + EDGE_BAND):
            edge.add(place_id)
    return inside, edge


def test_a_campaign_by_place_name_synced_headless_gives_its_businesses_in_every_format(
    nakodo, nominatim, release_root, tmp_path, database_url
):
    added = nakodo(
        *split('campaign add --name "Leeds & Swiss" --near Leeds --radius-km 25 --category cafe --category pub')
    )
    assert "Leeds, West Yorkshire, England, United Kingdom (53.7997,-1.5492), looked up" in added.stdout
    campaign_id = added.stdout.splitlines()[-1]
    nakodo("campaign", "add-location", campaign_id, "--country", "ch")
    # The same name typed differently is not looked up again.
    again = nakodo(*split('campaign add --name "Leeds pubs" --near "  LEEDS " --radius-km 5 --category pub'))
    assert "known from an earlier look-up" in again.stdout
    assert nominatim.queries() == ["leeds"]
    assert nominatim.requests[0]["user_agent"].startswith("nakodo_dagster/")
    paused_id = again.stdout.splitlines()[-1]
    nakodo("campaign", "pause", paused_id)

    synced = nakodo("sync", "--wait", "120", NAKODO_OVERTURE_ROOT=str(release_root))
    assert "0 failed" in synced.stdout and "0 areas still pending" in synced.stdout
    assert "businesses added" in synced.stderr, "a progress line on stderr"
    assert Path(tmp_path, "data", "dagster_home", "dagster.yaml").is_file(), "the default instance, made on demand"

    in_csv = list(csv.DictReader(io.StringIO(nakodo("results", campaign_id, "--format", "csv").stdout)))
    nakodo("results", campaign_id, "--format", "geojson", "--output", "leeds.geojson")
    nakodo("results", campaign_id, "--format", "geoparquet", "--output", "leeds.parquet")
    geojson = json.loads((tmp_path / "leeds.geojson").read_text())
    frame = gpd.read_parquet(tmp_path / "leeds.parquet")

    inside, edge = independent_businesses(release_root, CAMPAIGN)
    ids = [row["id"] for row in in_csv]
    assert len(ids) == len(set(ids)), "each business once"
    assert set(inside) <= set(ids) <= set(inside) | edge
    assert {None} < set(inside.values()), "the sample has businesses both near Leeds and in Switzerland"
    for row in in_csv:
        expected = inside.get(row["id"])
        if expected is None:
            assert row["distance_km"] == "" and row["country"] == "CH"
        else:
            assert math.isclose(float(row["distance_km"]), expected, rel_tol=0.006)
    distances = [float(row["distance_km"]) for row in in_csv if row["distance_km"]]
    assert distances == sorted(distances) and ids[: len(distances)] == [r["id"] for r in in_csv if r["distance_km"]]
    assert list(in_csv[0])[:6] == ["id", "name", "category", "lat", "lng", "distance_km"]
    assert {row["category"] for row in in_csv} == {"cafe", "pub"}

    assert geojson["type"] == "FeatureCollection"
    assert [f["id"] for f in geojson["features"]] == ids
    for feature, row in zip(geojson["features"], in_csv, strict=True):
        assert feature["geometry"] == {"type": "Point", "coordinates": [float(row["lng"]), float(row["lat"])]}
        assert (feature["properties"]["websites"] or []) == (row["websites"].split("; ") if row["websites"] else [])

    assert frame.crs.to_epsg() == 4326
    assert list(frame["id"]) == ids
    assert list(frame.geometry.x) == [float(row["lng"]) for row in in_csv]
    assert list(frame.geometry.y) == [float(row["lat"]) for row in in_csv]
    assert frame["distance_km"].isna().sum() == sum(1 for row in in_csv if not row["distance_km"])

    assert open_store(database_url).campaign_results(int(paused_id)) == [], "a paused campaign is not searched"
    status = nakodo("imports", "status").stdout.splitlines()
    areas = len(areas_for(CAMPAIGN))
    assert [line.split()[:5] for line in status[1:3]] == [
        ["cafe", str(areas), "0", "0", "0"],
        ["pub", str(areas), "0", "0", "0"],
    ]
