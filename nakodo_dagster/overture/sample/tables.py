"""The tables sample releases are made from, read once at import from the package data
``nakodo_dagster/data/sample_release.toml``: the cities places cluster around, the taxonomy, the fixed places, the words
and streets made-up places are named and addressed with; and which country a point around Basel lies in."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib.resources import files

import numpy as np


@dataclass(frozen=True)
class City:
    """A place where sample businesses cluster: a centre, its country and how far the places spread."""

    name: str
    lat: float
    lng: float
    country: str
    weight: float
    spread_km: float


@dataclass(frozen=True)
class Category:
    """One Overture category: its primary name, its hierarchy (general to specific) and its basic category."""

    primary: str
    hierarchy: tuple[str, ...]
    basic: str
    noun: str
    weight: float


@dataclass(frozen=True)
class FixedPlace:
    """A place written into every sample release, at an exact spot, to pin down one edge case."""

    name: str
    lat: float
    lng: float
    category: str
    # Address countries in order; () is a place with no address.
    countries: tuple[str, ...]
    locality: str
    confidence: float = 0.95
    status: str = "open"


_TABLES_FILE = "data/sample_release.toml"
_TABLES = tomllib.loads(files("nakodo_dagster").joinpath(_TABLES_FILE).read_text(encoding="utf-8"))
CITIES: tuple[City, ...] = tuple(City(**row) for row in _TABLES["cities"])
# Each category's parent in Overture's taxonomy, up to the top level.
_PARENTS: dict[str, str] = _TABLES["parents"]


def _hierarchy(primary: str) -> tuple[str, ...]:
    path = [primary]
    while path[-1] in _PARENTS:
        path.append(_PARENTS[path[-1]])
    return tuple(reversed(path))


TAXONOMY: tuple[Category, ...] = tuple(
    Category(row["primary"], _hierarchy(row["primary"]), row["basic"], row["noun"], float(row["weight"]))
    for row in _TABLES["categories"]
)
"""The sample's categories: in the previous schema the same names are ``categories.primary``, as they were."""
FIXED_PLACES: tuple[FixedPlace, ...] = tuple(
    FixedPlace(**{**row, "countries": tuple(row["countries"])}) for row in _TABLES["fixed_places"]
)
STATUSES = ("open", "temporarily_closed", "permanently_closed")
STATUS_SHARES = (0.93, 0.02, 0.05)
ADJECTIVES: tuple[str, ...] = tuple(_TABLES["adjectives"])
STREETS: dict[str, tuple[str, ...]] = {country: tuple(names) for country, names in _TABLES["streets"].items()}
DEFAULT_STREETS: tuple[str, ...] = tuple(_TABLES["default_streets"])
DIAL_CODES: dict[str, str] = _TABLES["dial_codes"]
DATASETS = ("meta", "Microsoft", "Foursquare", "AllThePlaces")
# Basel's tripoint with France and Germany, roughly: the Rhine runs north from it, France lies to the west.
_TRIPOINT_LAT = 47.59
_RHINE_LNG = 7.59
_FRENCH_BORDER_LNG = 7.555
BORDER_CITIES = ("Basel", "Mulhouse", "Freiburg im Breisgau")
BORDER_LOCALITIES = {"FR": "Saint-Louis", "DE": "Weil am Rhein", "CH": "Basel"}


def border_country(lat: np.ndarray, lng: np.ndarray) -> np.ndarray:
    """Which of FR, DE, CH a point around Basel lies in, by a rough rule of the Rhine and the French border."""
    north = lat >= _TRIPOINT_LAT
    french = (north & (lng < _RHINE_LNG)) | (~north & (lat >= 47.5) & (lng < _FRENCH_BORDER_LNG))
    german = north & (lng >= _RHINE_LNG)
    return np.where(french, "FR", np.where(german, "DE", "CH"))
