"""Plain helpers for the Overture tests: release names, and an independent reading of what a run should get."""

from __future__ import annotations

from pathlib import Path

import boto3
import pyarrow.dataset as ds

from nakodo_dagster.overture.reader import MIN_CONFIDENCE
from nakodo_dagster.overture.sample import publish_releases
from nakodo_dagster.placement import ImportRun, cell, cell_containing, country_area, import_runs

CURRENT = "2026-11-18.0"
PREVIOUS = "2026-10-15.0"
BUCKET = "nakodo-overture"
PREFIX = "release"

Row = tuple


def s3_client(endpoint: str):
    """A boto3 S3 client of the loopback server, signed with throwaway keys (the server accepts any)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-west-2",
        aws_access_key_id="uploader",
        aws_secret_access_key="uploader",
    )


def upload_releases(client, root: Path, bucket: str) -> None:
    """Every release under ``root`` uploaded under s3://bucket/PREFIX, readable by anyone as Overture's bucket is."""
    publish_releases(client, root, bucket, PREFIX)


def block_run(lat0: float, lng0: float, categories=("cafe", "pub", "restaurant")) -> ImportRun:
    """The one run for all 16 cells of the 2 x 2 degree block whose south-west corner is (lat0, lng0)."""
    cells = {c.key: c for c in (cell(lat0 + i / 2, lng0 + j / 2) for i in range(4) for j in range(4))}
    (run,) = import_runs({key: list(categories) for key in cells}, cells)
    return run


def fiji_run(categories=("cafe", "coffee_shop")) -> ImportRun:
    """The run for Fiji as one country, whose box crosses the antimeridian."""
    fiji = country_area("FJ")
    return ImportRun((fiji.key,), tuple(categories), fiji.bbox, "FJ", tuple((fiji.key, c) for c in categories))


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


def expected_rows(root: Path, release: str, run: ImportRun) -> list[Row]:
    """What the run should read, computed row by row in Python from pyarrow.dataset, not with the reader's SQL."""
    places = ds.dataset(root / release / "theme=places" / "type=place", format="parquet").to_table().to_pylist()
    rows = []
    for place in places:
        confidence = place["confidence"]
        if confidence is None or confidence < MIN_CONFIDENCE or place.get("operating_status") == "permanently_closed":
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
                    )
                )
    return sorted(rows, key=lambda row: (row[10], row[2], row[0]))
