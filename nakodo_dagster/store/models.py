"""What the store hands back: campaigns, accounts, reservations, import and search progress, coverage; plain data."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nakodo_dagster.drift import PairDrift
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    FRESH_DAYS,
    CountryLocation,
    ImportRun,
    Location,
    PointLocation,
    Targeting,
)
from nakodo_dagster.plans import Usage

CAMPAIGN_STATUSES = ("active", "paused")
MAX_CAMPAIGN_NAME = 200
MAX_ACCOUNT_NAME = 200
# The account every campaign that names none belongs to, on the plan without limits; migration 4 creates it with
# this id.
DEFAULT_ACCOUNT_ID = 1


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
    searched_landed: datetime | None = None
    """The newest real imported_at among the pairs the last search read: places it has already seen."""

    @property
    def landed_unread(self) -> bool:
        """Whether places landed after the newest landing the campaign's last search read."""
        return self.arrived_at is not None and (self.searched_landed is None or self.arrived_at > self.searched_landed)

    def pending(self, imports_on: bool) -> int:
        """Areas the search still waits on: with imports off nothing missing will ever come."""
        return self.coming + self.missing if imports_on else self.coming


@dataclass(frozen=True)
class ProgressCount:
    """What a count of the campaigns' progress (``Store.count_progress``) found."""

    maybe_due: list[SearchProgress]
    """The kept progress of the campaigns whose search may be due, by id."""
    active: int
    """Active campaigns whose progress is kept."""
    recounted: int
    """(campaign, area) rows the count worked out again: those whose pairs moved, and every area of a campaign
    counted whole."""


@dataclass(frozen=True)
class Campaign:
    """A campaign: where it looks, for what, and whether its search runs."""

    id: int
    name: str
    targeting: Targeting
    status: str
    created_at: datetime
    account_id: int
    paused_reason: str | None
    """Why the store paused the campaign (its account moved to a plan it no longer fits); None when it is active
    or was paused by hand."""


@dataclass(frozen=True)
class NewCampaign:
    """A campaign to create: what it is called, whose it is, where it looks and for what."""

    name: str
    account_id: int
    targeting: Targeting


class CampaignsRefused(InvalidInput):
    """Campaigns that were refused together, nothing written: why each one was, by its place in what was given."""

    def __init__(self, refusals: Mapping[int, str]) -> None:
        self.refusals = dict(sorted(refusals.items()))
        super().__init__("; ".join(f"campaign {index + 1}: {why}" for index, why in self.refusals.items()))


@dataclass(frozen=True)
class Account:
    """Who campaigns belong to, and the plan that bounds what their active campaigns may ask for."""

    id: int
    name: str
    plan: str
    created_at: datetime


@dataclass(frozen=True)
class AccountUsage:
    """An account, what its active campaigns hold, and how many of its campaigns its plan paused."""

    account: Account
    usage: Usage
    paused_for_plan: int


@dataclass(frozen=True)
class CampaignAccount:
    """The account a campaign belongs to, and whether the campaign is active (or paused, and why)."""

    campaign_id: int
    account: Account
    status: str
    paused_reason: str | None


@dataclass(frozen=True)
class ServedCampaigns:
    """The campaigns an import run serves: the first few names, oldest campaign first, and how many in all."""

    names: tuple[str, ...]
    count: int


@dataclass(frozen=True)
class Reservation:
    """Import runs this caller reserved, the stamp its marks carry (the key to taking them back), and what the
    campaigns missed before it: runs and pairs missing (reserved or left for later) and marks already on their way."""

    stamp: datetime
    runs: list[ImportRun]
    missing_runs: int
    missing_pairs: int
    coming_pairs: int
    paused_for_plan: int
    """Campaigns left out because their account's plan paused them."""
    first_runs: frozenset[str] = frozenset()
    """Keys of the runs that read a campaign's first block: they go before the rest of the queue."""
    relined: int = 0
    """Blocks whose missing pairs this look worked out again (those whose pairs changed since the last)."""
    served: Mapping[str, ServedCampaigns] = field(default_factory=dict)
    """By run key, the active campaigns the run's pairs serve."""


@dataclass(frozen=True)
class WrittenImport:
    """What one import wrote: rows per pair, and the pairs whose mark on its way belonged to another import (that
    mark's stamp), replaced by this write."""

    rows: dict[tuple[str, str], int]
    replaced_marks: dict[tuple[str, str], datetime]
    compared: dict[tuple[str, str], PairDrift] = field(default_factory=dict)
    """The pairs the drift gate compared (a newer release over places held), with their numbers."""
    held: dict[tuple[str, str], HeldImport] = field(default_factory=dict)
    """The compared pairs whose new rows the gate held: they keep their places and release."""


@dataclass(frozen=True)
class HeldImport:
    """A pair whose newer release's rows the drift gate held: its numbers, why, and since when."""

    area: str
    category: str
    drift: PairDrift
    reasons: str
    """Each measure past its limit, in words, separated by '; '."""
    held_at: datetime


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


@dataclass(frozen=True)
class ReleasePairs:
    """How far a release has reached: the pairs whose places come from it, those of them carried over to it unread
    (its changelog listed no change in their cells), and the pairs of it the drift gate holds (their places still
    come from the release before)."""

    release: str
    pairs: int
    carried: int
    held: int


# The job that rolls a release out from the Dagster UI (nakodo_dagster/jobs/roll_out.py), named where a roll-out is
# put in words.
ROLL_OUT_JOB = "roll_out_release"


@dataclass(frozen=True)
class RollOut:
    """How far a release has reached among the pairs that hold places, and when the last of the rest moves to a
    newer release without a roll-out (placement.last_move_at)."""

    release: str
    on_release: int
    pairs: int
    asked: int
    """Pairs asked to move to it now (``imports roll-out``) that the import sensor has not asked for yet."""
    last_move_at: datetime | None
    """None: every pair is on it."""

    def in_words(self) -> str:
        """The roll-out in one sentence, as the import sensor, the places asset and ``imports status`` say it."""
        text = f"Release {self.release}: {self.on_release:,} of {self.pairs:,} loaded pairs on it"
        if self.last_move_at is None:
            return f"{text}."
        asked = f"; {self.asked:,} asked to move now, on their way at the next ticks" if self.asked else ""
        return (
            f"{text}{asked}; at the {FRESH_DAYS}-day pace the last pair moves by {self.last_move_at:%Y-%m-%d %H:%M} "
            f"UTC. `nakodo imports roll-out {self.release} --campaign ID | --category C | --all` (or the job "
            f"{ROLL_OUT_JOB} in the Dagster UI) moves pairs now, through the import queue."
        )


@dataclass(frozen=True)
class CampaignLine:
    """Where an active campaign stands in the import queue's fair-share line, as the import sensor last lined up
    the missing blocks."""

    campaign_id: int
    name: str
    account: str
    first_pair: str
    """Its first pair's state (fresh, coming, failed or missing): its centre's area, its first category."""
    place: int | None
    """While the first pair waits for admission: its block's place in the line (1 goes next), else None."""
    blocks_waiting: int
    """How many of the campaign's blocks wait in the line."""


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
    """When the release was loaded, the mark asked for, or its import failed."""
    failure: str | None = None
    """Why the pair's import failed, if that was recorded (placement.PlaceImport.failure)."""


@dataclass(frozen=True)
class Coverage:
    """How the pairs active campaigns need stand: how many are in each state, and the first few of each."""

    counts: dict[str, int]
    """Pairs per state; every state of the rule is present, 0 if none."""
    listed: list[NeededPair]
    """At most the ``listed`` oldest pairs of each state, never-asked-for first."""
    recounted: int = 0
    """How many pairs the count looked at again: those that may have changed since the one before."""


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


def _check_name(kind: str, name: object, longest: int) -> str:
    """The name without surrounding spaces, if it is 1 to ``longest`` printable characters; InvalidInput if not.

    Quotes, semicolons and the like are welcome (every statement is parameterised); control characters are not:
    PostgreSQL refuses NUL, and a line break would split a row across lines of every listing.
    """
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name.strip()) > longest
        or any(unicodedata.category(character) == "Cc" for character in name.strip())
    ):
        raise InvalidInput(
            f"{kind} name {name!r} is not allowed: use 1 to {longest} characters of text, "
            "without control characters such as line breaks"
        )
    return name.strip()


def check_campaign_name(name: object) -> str:
    """The campaign name without surrounding spaces, if it is 1 to MAX_CAMPAIGN_NAME printable characters."""
    return _check_name("campaign", name, MAX_CAMPAIGN_NAME)


def check_account_name(name: object) -> str:
    """The account name without surrounding spaces, if it is 1 to MAX_ACCOUNT_NAME printable characters."""
    return _check_name("account", name, MAX_ACCOUNT_NAME)


def check_id(kind: str, value: object) -> int:
    """A campaign's or an account's id (``kind``), if it is a whole number."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{kind} id {value!r} is not allowed: use the whole number `{kind} list` shows")
    return value


def not_found(kind: str, value: object) -> InvalidInput:
    """The error for a campaign or an account (``kind``) that does not exist."""
    return InvalidInput(f"{kind} {value!r} does not exist; `nakodo {kind} list` shows the {kind}s")
