"""Where a campaign looks, as ``nakodo campaign`` takes it (--near, --at, --country, --radius-km) and prints it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import click
from geopy.geocoders import Nominatim

from nakodo_dagster.countries import country_name
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.geocode import geocode, nominatim, normalise_place_name
from nakodo_dagster.placement import RADII_KM, CountryLocation, Location, PointLocation
from nakodo_dagster.store import Store


def describe_location(location: Location) -> str:
    """A location as people read it: ``53.7997,-1.5492 within 25 km`` or ``CH (Switzerland)``."""
    if isinstance(location, PointLocation):
        return f"{location.lat:g},{location.lng:g} within {location.radius_km} km"
    return f"{location.country_code} ({country_name(location.country_code)})"


@dataclass(frozen=True)
class LocationRequest:
    """A location as typed, checked: ready, or a place name still to look up with its radius."""

    location: Location | None = None
    place_name: str | None = None
    radius_km: int | None = None
    geocoder: Nominatim | None = None

    def resolve(self, store: Store) -> Location:
        """The location, looking the place name up (once ever, then from the store) if there is one."""
        if self.location is not None:
            return self.location
        place, kept = geocode(store, self.place_name, self.geocoder)
        origin = "known from an earlier look-up" if kept else "looked up in OpenStreetMap"
        click.echo(f"{self.place_name!r} is {place.display_name} ({place.lat:g},{place.lng:g}), {origin}")
        return PointLocation(place.lat, place.lng, self.radius_km)


def parse_at(text: str) -> tuple[float, float]:
    """``LAT,LNG`` in decimal degrees as two numbers (their ranges are the policy's to check)."""
    parts = text.split(",")
    try:
        if len(parts) == 2:
            return float(parts[0]), float(parts[1])
    except ValueError:
        pass
    raise InvalidInput(f"--at {text!r} is not allowed: use LAT,LNG in decimal degrees, e.g. --at 53.7997,-1.5492")


def parse_location(near: str | None, at: str | None, country: str | None, radius_km: str | None) -> LocationRequest:
    """Exactly one of --near, --at or --country, a radius with a point and none with a country; checked fully."""
    given = [name for name, value in (("--near", near), ("--at", at), ("--country", country)) if value is not None]
    radii = ", ".join(str(r) for r in RADII_KM)
    if len(given) != 1:
        raise InvalidInput(
            f"give exactly one location, not {' and '.join(given) or 'none'}: "
            "--near PLACE or --at LAT,LNG with --radius-km R, or --country CC"
        )
    if country is not None:
        if radius_km is not None:
            raise InvalidInput("--radius-km goes with --near or --at; a --country is taken whole")
        return LocationRequest(CountryLocation(country.strip().upper()))
    if radius_km is None:
        raise InvalidInput(f"--radius-km is needed with {given[0]}; allowed: {radii}")
    if at is not None:
        return LocationRequest(PointLocation(*parse_at(at), int(radius_km)))
    normalise_place_name(near)
    return LocationRequest(place_name=near, radius_km=int(radius_km), geocoder=nominatim())


def location_options(command: Callable) -> Callable:
    """The options that name one location, shared by ``campaign add`` and ``campaign add-location``."""
    options = (
        click.option("--near", metavar="PLACE", help="A place name, looked up once in OpenStreetMap's Nominatim."),
        click.option("--at", metavar="LAT,LNG", help="A centre in decimal degrees, e.g. 53.7997,-1.5492."),
        click.option(
            "--radius-km",
            type=click.Choice([str(r) for r in RADII_KM]),
            help="The radius around --near or --at, in km.",
        ),
        click.option("--country", metavar="CC", help="A whole country by ISO 3166-1 alpha-2 code, e.g. FR."),
    )
    for option in reversed(options):
        command = option(command)
    return command
