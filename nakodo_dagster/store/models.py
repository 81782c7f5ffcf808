"""What the store hands back: campaigns, reservations, import and search progress, coverage; plain data."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    CountryLocation,
    ImportRun,
    Location,
    PointLocation,
    Targeting,
)

CAMPAIGN_STATUSES = ("active", "paused")
MAX_CAMPAIGN_NAME = 200


@dataclass(frozen=True)
class SearchProgress:
    """A campaign's areas by import state, when real data last landed, and its search's times."""

    campaign_id: int
    name: str
    areas: int
    coming: int
    """Areas an import is on its way for."""
    missing: int
    """Areas with a pair to ask for and nothing on its way."""
    not_loaded: int
    """Areas with a pair to ask for, on its way or not."""
    failed: int
    """Areas whose only gaps are failed imports sitting out their week."""
    arrived_at: datetime | None
    """The newest real imported_at among the campaign's pairs (marks ignored)."""
    window_start: datetime | None
    requested_at: datetime | None
    searched_at: datetime | None

    def pending(self, imports_on: bool) -> int:
        """Areas the search still waits on: with imports off nothing missing will ever come."""
        return self.coming + self.missing if imports_on else self.coming


@dataclass(frozen=True)
class Campaign:
    """A campaign: where it looks, for what, and whether its search runs."""

    id: int
    name: str
    targeting: Targeting
    status: str
    created_at: datetime


@dataclass(frozen=True)
class Reservation:
    """Import runs this caller reserved, the stamp its marks carry (the key to taking them back), and what the
    campaigns missed before it: runs and pairs missing (reserved or left for later) and marks already on their way."""

    stamp: datetime
    runs: list[ImportRun]
    missing_runs: int
    missing_pairs: int
    coming_pairs: int


@dataclass(frozen=True)
class ImportStatus:
    """How one category's (area, category) pairs stand: loaded, on their way, failed, or due again."""

    category: str
    fresh: int
    coming: int
    failed: int
    stale: int
    oldest_release_at: datetime | None
    """When the oldest real release of this category was loaded (marks ignored); None if none was."""


# The answers of placement.Cutoffs.state, in the order a reader goes through them.
PAIR_STATES = ("fresh", "coming", "failed", "missing")


@dataclass(frozen=True)
class NeededPair:
    """One pair an active campaign needs and its state by the one rule (fresh, coming, failed or missing)."""

    area: str
    category: str
    state: str
    release: str | None
    """The release loaded, ``requested`` for a mark, None if the pair was never asked for."""
    imported_at: datetime | None


@dataclass(frozen=True)
class Coverage:
    """How the pairs active campaigns need stand: how many are in each state, and the first few of each."""

    counts: dict[str, int]
    """Pairs per state; every state of the rule is present, 0 if none."""
    listed: list[NeededPair]
    """At most the ``listed`` oldest pairs of each state, never-asked-for first."""


@dataclass(frozen=True)
class PlaceName:
    """A place name as users type it (spaces collapsed, case folded) and the one place it was resolved to."""

    query: str
    display_name: str
    lat: float
    lng: float
    looked_up_at: datetime


def targeting_to_json(targeting: Targeting) -> str:
    """The targeting as the JSON text stored with a campaign."""
    locations = [
        {"type": "point", "lat": loc.lat, "lng": loc.lng, "radius_km": loc.radius_km}
        if isinstance(loc, PointLocation)
        else {"type": "country", "country_code": loc.country_code}
        for loc in targeting.locations
    ]
    return json.dumps({"locations": locations, "categories": list(targeting.categories)})


def targeting_from_json(text: str) -> Targeting:
    """The targeting JSON text describes, checked like anything a user types."""
    shape = (
        'use {"locations": [{"type": "point", "lat": 53.8, "lng": -1.55, "radius_km": 10} or '
        '{"type": "country", "country_code": "FR"}, ...], "categories": ["cafe", ...]}'
    )
    try:
        data = json.loads(text)
        raw_locations, categories = data["locations"], data["categories"]
        locations = tuple(_location(item) for item in raw_locations)
    except InvalidInput:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"targeting is not valid: {exc!r}; {shape}") from exc
    if not isinstance(categories, list):
        raise InvalidInput(f"targeting categories must be a list; {shape}")
    return Targeting(locations, tuple(categories))


def _location(item: Mapping[str, Any]) -> Location:
    if item["type"] == "point":
        return PointLocation(item["lat"], item["lng"], item["radius_km"])
    if item["type"] == "country":
        return CountryLocation(item["country_code"])
    raise InvalidInput(f"location type {item['type']!r} is not known; allowed: 'point', 'country'")


def check_campaign_name(name: object) -> str:
    """The name without surrounding spaces, if it is 1 to MAX_CAMPAIGN_NAME printable characters; InvalidInput if not.

    Quotes, semicolons and the like are welcome (every statement is parameterised); control characters are not:
    PostgreSQL refuses NUL, and a line break would split a campaign across lines of every listing.
    """
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name.strip()) > MAX_CAMPAIGN_NAME
        or any(unicodedata.category(character) == "Cc" for character in name.strip())
    ):
        raise InvalidInput(
            f"campaign name {name!r} is not allowed: use 1 to {MAX_CAMPAIGN_NAME} characters of text, "
            "without control characters such as line breaks"
        )
    return name.strip()


def _check_campaign_id(campaign_id: object) -> int:
    if isinstance(campaign_id, bool) or not isinstance(campaign_id, int):
        raise InvalidInput(f"campaign id {campaign_id!r} is not allowed: use the whole number `campaign list` shows")
    return campaign_id


def _no_campaign(campaign_id: object) -> InvalidInput:
    return InvalidInput(f"campaign {campaign_id!r} does not exist; `nakodo campaign list` shows the campaigns")
