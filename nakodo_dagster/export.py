"""A campaign's businesses as people use them: a table to read, CSV for a spreadsheet, GeoJSON or GeoParquet for a map.

Every format keeps the store's order, nearest first (businesses matched by a whole country, with no distance,
last). Websites and phones are lists: JSON arrays in GeoJSON, list columns in GeoParquet, and in CSV one cell
joined by ``"; "`` (a URL holds no space and a phone number no semicolon, so the cell splits back exactly).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.store import RESULT_COLUMNS

FORMATS = ("table", "csv", "geojson", "geoparquet")
BINARY_FORMATS = ("geoparquet",)
LIST_SEPARATOR = "; "
_LIST_COLUMNS = ("websites", "phones")
# What fits a terminal: the rest is in the other formats.
_TABLE_COLUMNS = (
    ("distance_km", "km"),
    ("name", "name"),
    ("category", "category"),
    ("address", "address"),
    ("removed_in", "removed in"),
    ("closed_in", "closed in"),
)
_TABLE_WIDTH = 48

Result = dict[str, Any]


def columns(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows as aligned text columns under a header, each cell on one line and cut to a readable width."""
    cells = [[_cell(value) for value in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n" for row in cells
    )


def write_table(results: Sequence[Result], out: TextIO) -> None:
    """Aligned columns for a terminal, and the count at the end."""
    rows = [
        [number, *(_km(result[c]) if c == "distance_km" else result[c] for c, _ in _TABLE_COLUMNS)]
        for number, result in enumerate(results, start=1)
    ]
    out.write(columns(["#", *(title for _, title in _TABLE_COLUMNS)], rows))
    out.write(f"{len(results)} businesses\n")


def _km(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _cell(value: object) -> str:
    text = "" if value is None else " ".join(str(value).split())
    return text if len(text) <= _TABLE_WIDTH else text[: _TABLE_WIDTH - 1] + "…"


def write_csv(results: Sequence[Result], out: TextIO) -> None:
    """A header row (id, name, category, lat, lng, distance_km, ...) and one row per business."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(RESULT_COLUMNS)
    for result in results:
        writer.writerow(
            [
                LIST_SEPARATOR.join(result[c] or []) if c in _LIST_COLUMNS else "" if result[c] is None else result[c]
                for c in RESULT_COLUMNS
            ]
        )


def write_geojson(results: Sequence[Result], out: TextIO) -> None:
    """An RFC 7946 FeatureCollection of points, the Overture id as each feature's id and in its properties."""
    features = [
        {
            "type": "Feature",
            "id": result["id"],
            "geometry": {"type": "Point", "coordinates": [result["lng"], result["lat"]]},
            "properties": {column: result[column] for column in RESULT_COLUMNS if column not in ("lat", "lng")},
        }
        for result in results
    ]
    json.dump({"type": "FeatureCollection", "features": features}, out, ensure_ascii=False)
    out.write("\n")


def write_geoparquet(results: Sequence[Result], path: Path) -> None:
    """GeoParquet (WGS84 points, a geometry column) written by geopandas, every result column kept."""
    # geopandas takes a second to import: only this format pays for it.
    import geopandas as gpd
    import pandas as pd

    frame = pd.DataFrame(list(results), columns=list(RESULT_COLUMNS))
    geometry = gpd.points_from_xy(frame["lng"], frame["lat"], crs="EPSG:4326")
    gpd.GeoDataFrame(frame, geometry=geometry).to_parquet(path, index=False)


TEXT_WRITERS = {"table": write_table, "csv": write_csv, "geojson": write_geojson}


def check_destination(fmt: str, path: Path | None) -> None:
    """InvalidInput unless ``fmt`` is a known format and, if binary, goes to a file in an existing folder."""
    if fmt not in FORMATS:
        raise InvalidInput(f"format {fmt!r} is not known; allowed: {', '.join(FORMATS)}")
    if fmt in BINARY_FORMATS and path is None:
        raise InvalidInput(f"--format {fmt} is binary: give --output FILE, e.g. --output results.parquet")
    if path is not None and not path.absolute().parent.is_dir():
        raise InvalidInput(f"--output {str(path)!r} is not allowed: its folder does not exist")


def write_results(results: Sequence[Result], fmt: str, out: TextIO, path: Path | None) -> None:
    """Write in ``fmt`` to ``path`` if given, else to the text stream ``out``.

    A file is written aside and moved into place: a failure half way never leaves half a file under its name.
    """
    check_destination(fmt, path)
    if path is None:
        TEXT_WRITERS[fmt](results, out)
        return
    aside = path.with_name(f".{path.name}.partial")
    try:
        if fmt in BINARY_FORMATS:
            write_geoparquet(results, aside)
        else:
            with aside.open("w", encoding="utf-8", newline="") as file:
                TEXT_WRITERS[fmt](results, file)
        aside.replace(path)
    finally:
        aside.unlink(missing_ok=True)
