"""The shipped country boxes: every ISO code, valid boxes, the antimeridian and overseas territories right."""

from __future__ import annotations

from importlib.resources import files

import pycountry
import pytest

from nakodo_dagster.countries import BBox, country_bbox, country_codes, country_name
from nakodo_dagster.errors import InvalidInput


def bbox_contains(bbox: BBox, lat: float, lng: float) -> bool:
    """Whether (lat, lng) is in a (west, south, east, north) box; west > east crosses the antimeridian."""
    west, south, east, north = bbox
    if not south <= lat <= north:
        return False
    if west <= east:
        return west <= lng <= east
    return lng >= west or lng <= east


def test_every_pycountry_code_and_nothing_else() -> None:
    assert country_codes() == sorted(country.alpha_2 for country in pycountry.countries)
    assert len(country_codes()) == 249


def test_names_are_pycountry_names() -> None:
    for country in pycountry.countries:
        assert country_name(country.alpha_2) == country.name


@pytest.mark.parametrize("code", sorted(country.alpha_2 for country in pycountry.countries))
def test_every_box_is_valid(code: str) -> None:
    west, south, east, north = country_bbox(code)
    assert -90.0 <= south < north <= 90.0
    assert -180.0 <= west <= 180.0
    assert -180.0 <= east <= 180.0
    # west == east would be a zero-width box, or a whole circle spelled ambiguously.
    assert west != east


def test_csv_header_names_its_source() -> None:
    text = files("nakodo_dagster").joinpath("data/countries.csv").read_text(encoding="utf-8")
    header = " ".join(line for line in text.splitlines() if line.startswith("#"))
    assert "Natural Earth" in header
    assert "scripts/build_countries.py" in header


@pytest.mark.parametrize("code", ["FJ", "KI", "RU", "NZ", "US"])
def test_antimeridian_countries_cross(code: str) -> None:
    west, _, east, _ = country_bbox(code)
    assert west > east


@pytest.mark.parametrize(
    ("code", "place", "lat", "lng"),
    [
        ("FJ", "Suva", -18.14, 178.44),
        ("FJ", "Lakeba, Lau Islands", -18.2, -178.8),
        ("KI", "South Tarawa", 1.45, 173.0),
        ("KI", "Kiritimati", 1.87, -157.4),
        ("RU", "Anadyr", 64.73, 177.5),
        ("RU", "Kaliningrad", 54.7, 20.5),
        ("RU", "Moscow", 55.75, 37.62),
        ("NZ", "Waitangi, Chatham Islands", -43.95, -176.55),
        ("NZ", "Auckland", -36.85, 174.76),
        ("US", "Adak", 51.88, -176.65),
        ("US", "Honolulu", 21.31, -157.86),
        ("US", "New York", 40.71, -74.01),
        ("US", "Anchorage", 61.22, -149.9),
        ("FR", "Paris", 48.86, 2.35),
        ("FR", "Ajaccio", 41.93, 8.74),
        ("RE", "Saint-Denis", -20.88, 55.45),
        ("GF", "Cayenne", 4.93, -52.33),
        ("SJ", "Longyearbyen", 78.22, 15.65),
        ("NO", "Oslo", 59.91, 10.75),
        ("BQ", "Kralendijk", 12.15, -68.27),
        ("NL", "Amsterdam", 52.37, 4.9),
        ("TK", "Nukunonu", -9.2, -171.85),
        ("CL", "Hanga Roa, Easter Island", -27.15, -109.43),
        ("AQ", "McMurdo Station", -77.85, 166.67),
        ("AQ", "Rothera", -67.57, -68.13),
    ],
)
def test_known_places_are_in_their_box(code: str, place: str, lat: float, lng: float) -> None:
    assert bbox_contains(country_bbox(code), lat, lng), f"{place} is outside {code} {country_bbox(code)}"


@pytest.mark.parametrize(
    ("code", "place", "lat", "lng"),
    [
        # Territories with their own ISO code are not in their sovereign's box: Overture addresses there
        # carry the territory's code.
        ("FR", "Saint-Denis, Réunion", -20.88, 55.45),
        ("FR", "Cayenne, French Guiana", 4.93, -52.33),
        ("FR", "Nouméa, New Caledonia", -22.27, 166.44),
        ("NO", "Longyearbyen, Svalbard", 78.22, 15.65),
        ("NL", "Kralendijk, Bonaire", 12.15, -68.27),
        ("NZ", "Nukunonu, Tokelau", -9.2, -171.85),
        ("US", "San Juan, Puerto Rico", 18.47, -66.11),
        ("US", "Hagåtña, Guam", 13.48, 144.75),
        # The crossing boxes are the short way round, not the long one.
        ("FJ", "Greenwich", 51.48, 0.0),
        ("RU", "Fairbanks, Alaska", 64.84, -147.72),
        ("US", "Tokyo", 35.68, 139.69),
        ("KI", "Honolulu", 21.31, -157.86),
    ],
)
def test_places_outside_the_box(code: str, place: str, lat: float, lng: float) -> None:
    assert not bbox_contains(country_bbox(code), lat, lng), f"{place} is inside {code} {country_bbox(code)}"


def test_metropolitan_france_is_tight() -> None:
    west, south, east, north = country_bbox("FR")
    assert (-5.2 < west < -5.0, 41.3 < south < 41.4, 9.5 < east < 9.6, 51.0 < north < 51.2) == (True,) * 4


def test_antarctica_covers_every_longitude() -> None:
    assert country_bbox("AQ")[0::2] == (-180.0, 180.0)


@pytest.mark.parametrize("code", ["XX", "fr", "FRA", "", " FR", "XK", None, 250])
def test_unknown_code_is_invalid_input(code: object) -> None:
    with pytest.raises(InvalidInput):
        country_bbox(code)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        country_name(code)  # type: ignore[arg-type]
