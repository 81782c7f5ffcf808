"""Regenerate nakodo_dagster/data/country_outlines.json: every country's outline (and so the coastlines) for the
campaign maps.

Source: Natural Earth 1:110m "Admin 0 - Countries" 4.1.0 (public domain, https://www.naturalearthdata.com), as
redistributed in TopoJSON by the npm package world-atlas 2.0.2 (countries-110m.json; package licence ISC,
Copyright 2013-2019 Michael Bostock; the data itself is Natural Earth's, in the public domain).

The TopoJSON's shared arcs are decoded (quantised, delta-encoded) and stitched into plain rings, each a flat list
[lng0, lat0, lng1, lat1, ...] rounded to 3 decimals (about 100 m: the quantisation step is 0.0036 degree of
longitude, and 1:110m lines are kilometres off anyway). Natural Earth already cuts polygons at the antimeridian,
so every ring lies within -180..180. Each country carries its ISO 3166-1 alpha-2 code (from the file's numeric
code through pycountry) or null (N. Cyprus, Somaliland, Kosovo have none), and Natural Earth's short name for
the map ("Dem. Rep. Congo").

Rerun (only this script needs the source; the package reads the committed JSON and nothing else):
    cd "$(mktemp -d)" && npm pack world-atlas@2.0.2 && tar xzf world-atlas-2.0.2.tgz
    .venv/bin/python scripts/build_outlines.py "$PWD/package/countries-110m.json"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pycountry

OUTPUT = Path(__file__).resolve().parent.parent / "nakodo_dagster" / "data" / "country_outlines.json"
DECIMALS = 3
SOURCE = (
    "Natural Earth 1:110m Admin 0 - Countries 4.1.0 (public domain), from the npm package world-atlas 2.0.2 "
    "(countries-110m.json, ISC licence, Copyright 2013-2019 Michael Bostock); built by scripts/build_outlines.py"
)

Point = tuple[float, float]


def decode_arcs(topology: dict) -> list[list[Point]]:
    """Every arc in degrees: TopoJSON stores quantised positions, each after the first as a delta."""
    (scale_x, scale_y), (translate_x, translate_y) = topology["transform"]["scale"], topology["transform"]["translate"]
    arcs = []
    for arc in topology["arcs"]:
        x = y = 0
        points = []
        for dx, dy in arc:
            x, y = x + dx, y + dy
            points.append((x * scale_x + translate_x, y * scale_y + translate_y))
        arcs.append(points)
    return arcs


def stitch(ring: list[int], arcs: list[list[Point]]) -> list[Point]:
    """A ring from its arc indexes; ~i is arc i reversed, and each arc after the first repeats the last point."""
    points: list[Point] = []
    for index in ring:
        arc = arcs[index] if index >= 0 else arcs[~index][::-1]
        points.extend(arc if not points else arc[1:])
    return points


def _flat(points: list[Point]) -> list[float]:
    return [round(value, DECIMALS) for point in points for value in point]


def _code(numeric: str | None) -> str | None:
    country = pycountry.countries.get(numeric=numeric) if numeric else None
    return country.alpha_2 if country else None


def build(topology: dict) -> dict:
    arcs = decode_arcs(topology)
    countries = []
    for geometry in topology["objects"]["countries"]["geometries"]:
        polygons = [geometry["arcs"]] if geometry["type"] == "Polygon" else geometry["arcs"]
        countries.append(
            {
                "code": _code(geometry.get("id")),
                "name": geometry["properties"]["name"],
                # Each polygon: its outer ring, then its holes.
                "polygons": [[_flat(stitch(ring, arcs)) for ring in polygon] for polygon in polygons],
            }
        )
    return {"source": SOURCE, "countries": sorted(countries, key=lambda c: c["name"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topojson", type=Path, help="world-atlas 2.0.2's countries-110m.json")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    outlines = build(json.loads(args.topojson.read_text(encoding="utf-8")))
    args.output.write_text(json.dumps(outlines, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {len(outlines['countries'])} countries, {args.output.stat().st_size:,} bytes, to {args.output}")


if __name__ == "__main__":
    main()
