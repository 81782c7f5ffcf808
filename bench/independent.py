"""An independent reading of a release, for the tests and the fault soak: what an import run should get and which
businesses a campaign should then hold, worked out row by row in Python from pyarrow.dataset and WGS84 geodesics
(geographiclib), not with the reader's or the store's SQL."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow.dataset as ds
from geographiclib.geodesic import Geodesic

from nakodo_dagster.overture.reader import MIN_CONFIDENCE
from nakodo_dagster.placement import ImportRun, PointLocation, Targeting, cell_containing

# (id, name, category, lat, lng, confidence, address line, country, websites, phones, area)
Row = tuple
# A Row as a read returns it, with the place's source records ('dataset:record_id' sorted, joined by '|') and whether
# Overture marks it permanently closed.
ReadRow = tuple
# Haversine on a sphere (the store's search) and WGS84 geodesics differ by up to 0.5 %: places that close to a
# circle's edge are not judged.
EDGE_BAND = 0.006


def first_address_line(address: dict | None) -> str | None:
    """The one-line address the reader promises, built by hand: 'freeform, postcode locality'."""
    if not address:
        return None
    town = " ".join(part for part in (address["postcode"], address["locality"]) if part)
    return ", ".join(part for part in (address["freeform"], town) if part) or None


def _in_box(bbox: tuple[float, float, float, float], lat: float, lng: float) -> bool:
    west, south, east, north = bbox
    if not south <= lat <= north:
        return False
    # The antimeridian itself (180) belongs with -180.
    if west == -180 and lng == 180:
        return True
    return west <= lng <= east if west <= east else (lng >= west or lng <= east)


def _matches(place: dict, category: str) -> bool:
    if "taxonomy" in place:
        taxonomy = place["taxonomy"] or {}
        return (
            category == taxonomy.get("primary")
            or category in (taxonomy.get("hierarchy") or [])
            or category == place.get("basic_category")
        )
    return category == (place["categories"] or {}).get("primary")


def _places_near(root: Path, release: str, bbox: tuple[float, float, float, float]) -> list[dict]:
    """The release's places whose own box reaches the latitudes of ``bbox``: a place's point, the middle of its
    box, lies inside its box, so none the run could read is left out, and a run does not turn the whole release
    into Python objects (seconds and a gigabyte and a half for the soak's 200,000 places)."""
    south, north = bbox[1], bbox[3]
    near = (ds.field("bbox", "ymin") <= north) & (ds.field("bbox", "ymax") >= south)
    dataset = ds.dataset(root / release / "theme=places" / "type=place", format="parquet")
    return dataset.to_table(filter=near).to_pylist()


def source_records(place: dict) -> str | None:
    """A place's source records as a read gives them: each 'dataset:record_id' once, sorted, joined by '|'."""
    records = sorted({f"{s['dataset']}:{s['record_id']}" for s in place.get("sources") or [] if s["record_id"]})
    return "|".join(records) or None


def expected_rows(root: Path, release: str, run: ImportRun) -> list[Row]:
    """The businesses the run should read (no closed place), computed row by row in Python from pyarrow.dataset, not
    with the reader's SQL."""
    return [row[:-2] for row in expected_read(root, release, run) if not row[-1]]


def expected_read(root: Path, release: str, run: ImportRun) -> list[ReadRow]:
    """Every row the run should read, places Overture marks permanently closed included (whatever their
    confidence), with their source records and whether closed."""
    rows = []
    for place in _places_near(root, release, run.bbox):
        confidence = place["confidence"]
        closed = place.get("operating_status") == "permanently_closed"
        if not closed and (confidence is None or confidence < MIN_CONFIDENCE):
            continue
        box = place["bbox"]
        lat, lng = (box["ymin"] + box["ymax"]) / 2, (box["xmin"] + box["xmax"]) / 2
        first = place["addresses"][0] if place["addresses"] else None
        country = first["country"] if first else None
        if run.country_code:
            if country != run.country_code or not _in_box(run.bbox, lat, lng):
                continue
            area = run.areas[0]
        else:
            area = cell_containing(lat, lng).key
        for pair_area, category in run.pairs:
            if pair_area == area and _matches(place, category):
                rows.append(
                    (
                        place["id"],
                        place["names"]["primary"],
                        category,
                        lat,
                        lng,
                        confidence,
                        first_address_line(first),
                        country,
                        place["websites"],
                        place["phones"],
                        area,
                        source_records(place),
                        closed,
                    )
                )
    return sorted(rows, key=lambda row: (row[10], row[2], row[0]))


def campaign_businesses(rows: Iterable[Row], targeting: Targeting) -> tuple[set[str], set[str]]:
    """(ids surely in, ids too near a circle's edge to call) of a campaign, among ``rows`` (``expected_rows`` of
    its pairs): a country's places are all in, a cell's are in within a point's radius, by WGS84 geodesic."""
    points = [location for location in targeting.locations if isinstance(location, PointLocation)]
    inside, edge = set(), set()
    for place_id, _, _, lat, lng, *_, area in rows:
        if area.startswith("country:"):
            inside.add(place_id)
            continue
        distances = [(Geodesic.WGS84.Inverse(p.lat, p.lng, lat, lng)["s12"] / 1000, p.radius_km) for p in points]
        if any(km <= radius * (1 - EDGE_BAND) for km, radius in distances):
            inside.add(place_id)
        elif any(km <= radius * (1 + EDGE_BAND) for km, radius in distances):
            edge.add(place_id)
    return inside, edge
