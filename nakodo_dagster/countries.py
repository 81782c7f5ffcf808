"""Every ISO 3166-1 alpha-2 country with the bounding box its import reads, from data shipped in the package."""

from __future__ import annotations

import csv
from functools import cache
from importlib.resources import files

from nakodo_dagster.errors import InvalidInput

BBox = tuple[float, float, float, float]


@cache
def _boxes() -> dict[str, tuple[str, BBox]]:
    text = files("nakodo_dagster").joinpath("data/countries.csv").read_text(encoding="utf-8")
    return {
        row["code"]: (row["name"], (float(row["west"]), float(row["south"]), float(row["east"]), float(row["north"])))
        for row in csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    }


def country_codes() -> list[str]:
    """All known ISO 3166-1 alpha-2 codes, sorted."""
    return sorted(_boxes())


def country_name(code: str) -> str:
    """The country's English short name."""
    return _lookup(code)[0]


def country_bbox(code: str) -> BBox:
    """(west, south, east, north); west > east for a country across the antimeridian (RFC 7946)."""
    return _lookup(code)[1]


def _lookup(code: str) -> tuple[str, BBox]:
    if isinstance(code, str) and code in _boxes():
        return _boxes()[code]
    raise InvalidInput(
        f"country {code!r} is not known: use an ISO 3166-1 alpha-2 code in capitals, e.g. 'FR', 'GB', 'FJ'"
    )
