"""Place names to points, through OpenStreetMap's Nominatim, each name looked up once and kept in the store.

People type "Leeds", not 53.7997,-1.5492. Nominatim's usage policy asks for an identifying user agent, at most
one request a second and no repeated queries, so an answer is kept in the store's ``place_names`` and the same
name (spaces collapsed, case ignored) never reaches Nominatim again.

A name is ambiguous when Nominatim cannot tell which place is meant. Nominatim ranks its candidates by
``importance`` (0 to 1, from the place's rank and its links to Wikipedia), and the rule is:

- up to ``CANDIDATES`` candidates are asked for; none is an unknown name;
- candidates within ``SAME_PLACE_KM`` of the most important one are the same place mapped twice (a town's
  node and its boundary) and are not rivals;
- the most important candidate is chosen when it leads every rival by at least ``IMPORTANCE_MARGIN`` (a capital
  far ahead of its namesakes); otherwise the name is ambiguous (two towns of similar standing, such as the
  Cambridges of England and Massachusetts) and the error lists the candidates, so that the user can be more
  specific ("Cambridge, Massachusetts") or give ``--at LAT,LNG``.

Unknown and ambiguous names are not kept: nothing is written for input that is refused.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from geopy.distance import geodesic
from geopy.exc import GeopyError
from geopy.geocoders import Nominatim

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.redact import redacted_url
from nakodo_dagster.store import PlaceName, Store

NOMINATIM_URL_VARIABLE = "NAKODO_NOMINATIM_URL"
DEFAULT_NOMINATIM_URL = "https://nominatim.openstreetmap.org"
# Nominatim's usage policy: identify the application; geopy refuses its own default agent.
USER_AGENT = "nakodo_dagster/0.1 (+https://nakodo.app/how-it-works#businesses)"
CANDIDATES = 5
IMPORTANCE_MARGIN = 0.1
SAME_PLACE_KM = 5.0
TIMEOUT_SECONDS = 10
MAX_PLACE_NAME = 200
_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~/-]*)?")


class GeocoderUnavailable(RuntimeError):
    """Nominatim could not be asked (network, timeout, refusal): not the user's fault, so not InvalidInput."""


@dataclass(frozen=True)
class Candidate:
    """One place Nominatim offers for a name."""

    display_name: str
    lat: float
    lng: float
    importance: float


def normalise_place_name(name: object) -> str:
    """The name as it is looked up and kept: spaces collapsed, case folded; InvalidInput if it is not a name."""
    if not isinstance(name, str) or any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidInput(f"place name {name!r} is not allowed: use text without control characters, e.g. 'Leeds'")
    query = " ".join(name.split()).casefold()
    if not query or len(query) > MAX_PLACE_NAME:
        raise InvalidInput(
            f"place name {name!r} is not allowed: use 1 to {MAX_PLACE_NAME} characters, e.g. 'Leeds' or "
            "'Cambridge, Massachusetts'"
        )
    return query


def nominatim(url: str | None = None) -> Nominatim:
    """The Nominatim at ``url``, else at NAKODO_NOMINATIM_URL, else OpenStreetMap's public service."""
    url = url or os.environ.get(NOMINATIM_URL_VARIABLE) or DEFAULT_NOMINATIM_URL
    if not _URL.fullmatch(url):
        raise InvalidInput(
            f"{NOMINATIM_URL_VARIABLE} {redacted_url(url)!r} is not allowed: use http(s)://host[:port][/path] of a "
            f"Nominatim server, e.g. {DEFAULT_NOMINATIM_URL}"
        )
    parts = urlsplit(url)
    return Nominatim(
        user_agent=USER_AGENT,
        domain=parts.netloc + parts.path.rstrip("/"),
        scheme=parts.scheme,
        timeout=TIMEOUT_SECONDS,
    )


def choose(name: str, candidates: list[Candidate]) -> Candidate:
    """The one place a name means, by the rule in this module's docstring; InvalidInput if unknown or ambiguous."""
    if not candidates:
        raise InvalidInput(
            f"no place called {name!r} is known to OpenStreetMap: check the spelling, add the region or country "
            "(e.g. 'Leeds, England'), or give --at LAT,LNG"
        )
    ranked = sorted(candidates, key=lambda c: -c.importance)
    best = ranked[0]
    rivals = [c for c in ranked[1:] if geodesic((best.lat, best.lng), (c.lat, c.lng)).km > SAME_PLACE_KM]
    if all(best.importance - c.importance >= IMPORTANCE_MARGIN for c in rivals):
        return best
    listing = "; ".join(f"{c.display_name} ({c.lat:.4f},{c.lng:.4f})" for c in [best, *rivals])
    raise InvalidInput(
        f"place name {name!r} is ambiguous: it could be {listing}. Name the region or country "
        "(e.g. 'Cambridge, England'), or give --at LAT,LNG"
    )


def look_up(name: str, geocoder: Nominatim) -> list[Candidate]:
    """Nominatim's candidates for a name, most important first as Nominatim gives them."""
    try:
        found = geocoder.geocode(name, exactly_one=False, limit=CANDIDATES, language="en") or []
    except GeopyError as exc:
        raise GeocoderUnavailable(f"Nominatim at {geocoder.api} could not be asked about {name!r}: {exc}") from exc
    return [
        Candidate(
            location.address,
            location.latitude,
            location.longitude,
            float(location.raw.get("importance") or 0.0),
        )
        for location in found
    ]


def geocode(store: Store, name: str, geocoder: Nominatim | None = None) -> tuple[PlaceName, bool]:
    """The place a name means, and whether it came from the store; looked up (and kept) only the first time."""
    query = normalise_place_name(name)
    if known := store.place_name(query):
        return known, True
    best = choose(name, look_up(query, geocoder or nominatim()))
    return store.remember_place_name(PlaceName(query, best.display_name, best.lat, best.lng, datetime.now(UTC))), False
