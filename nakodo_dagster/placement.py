"""Which pieces of the Overture listing a campaign needs, and how to fetch them in as few runs as possible.

Pure functions over plain data: no database, no Dagster, no clock (callers pass ``now``). The rules and
their reasons are in ``SPEC.md`` and the two seed articles; the names are the seeds' names.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nakodo_dagster.countries import country_bbox
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.words import plural

RADII_KM = (2, 5, 10, 25, 50, 100, 200)
CELL_DEGREES = 0.5
KM_PER_DEGREE = 111.32
# Cells per side of an import block: 4 x 4 cells of 0.5 degree is one 2 degree box, one run, one footer read.
BLOCK_CELLS = 4
BLOCK_DEGREES = BLOCK_CELLS * CELL_DEGREES
# Overture publishes monthly; 30 days would make a late release look like a stale cache every month.
FRESH_DAYS = 35
# Two imports run at once; six hours is the window in which a queued import is still plausibly on its way.
IMPORT_HOURS = 6
# A failed import keeps its mark for a week: the cheapest way not to hammer a job that keeps failing.
RETRY_DAYS = 7
# Why a mark reads as failed when its import never said: nothing landed within IMPORT_HOURS of asking.
LOST_IMPORT = f"no import finished within {IMPORT_HOURS} hours of being asked for"
REQUESTED = "requested"
# A sensor's run requests become runs (queued at least) within seconds; a mark this old whose run does not exist
# was never handed to Dagster (the daemon died between the tick and the launch), and nothing is on its way.
LAUNCH_GRACE_MINUTES = 5
# At 89 degrees cos(lat) is 0.017 and a 200 km circle would ask for a quarter of the planet.
MIN_COS_LAT = 0.05

CATEGORY_PATTERN = re.compile(r"[a-z0-9_]{1,64}")
_CELL_KEY = re.compile(r"cell:(-?\d+(?:\.5)?),(-?\d+(?:\.5)?)")
_COUNTRY_KEY = re.compile(r"country:([A-Z]{2})")

BBox = tuple[float, float, float, float]
"""(west, south, east, north) in degrees; west > east when the box crosses the antimeridian (RFC 7946)."""


@dataclass(frozen=True)
class Area:
    """A piece of the listing imported as a unit: a 0.5 degree cell or a whole country."""

    key: str
    bbox: BBox
    country_code: str | None = None


@dataclass(frozen=True)
class PointLocation:
    """A circle a campaign targets: a centre and one of the offered radii."""

    lat: float
    lng: float
    radius_km: int

    def __post_init__(self) -> None:
        _check_point(self.lat, self.lng, self.radius_km)


@dataclass(frozen=True)
class CountryLocation:
    """A whole country a campaign targets, by ISO 3166-1 alpha-2 code."""

    country_code: str

    def __post_init__(self) -> None:
        country_bbox(self.country_code)


Location = PointLocation | CountryLocation


@dataclass(frozen=True)
class Targeting:
    """Where a campaign looks and which kinds of business it wants."""

    locations: tuple[Location, ...]
    categories: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.locations:
            raise InvalidInput("a campaign needs at least one location: a point with a radius, or a country")
        check_categories(self.categories)


@dataclass(frozen=True)
class PlaceImport:
    """A row of ``place_imports``: what was loaded for an (area, category) pair, or that it was asked for."""

    area: str
    category: str
    release: str
    rows: int
    imported_at: datetime
    """When the release was loaded; for a mark, when it was asked for, or when its import failed."""
    failure: str | None = None
    """Why the mark's import failed, recorded when it did (its imported_at is then the failure's time); None for a
    release, a mark on its way, or a mark whose import was lost without a word."""
    roll_out: str | None = None
    """The release an analyst asked this loaded pair to move to now (``imports roll-out``), until its mark is
    written; None otherwise."""


@dataclass(frozen=True)
class Needs:
    """What a set of pairs needs: pairs to ask for, areas waiting on an import, when real data last landed, and
    the areas left alone after a failed import, each with why."""

    missing: dict[str, list[str]]
    coming: set[str]
    arrived_at: datetime | None
    failed: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportRun:
    """One import: one box read once, writing exactly the (area, category) pairs it reserved."""

    areas: tuple[str, ...]
    categories: tuple[str, ...]
    bbox: BBox
    country_code: str | None
    pairs: tuple[tuple[str, str], ...]
    key: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha1(json.dumps(self.payload(), sort_keys=True).encode()).hexdigest()
        object.__setattr__(self, "key", digest)

    def payload(self) -> dict:
        """The canonical, JSON-ready description of the work; its hash is the run's identity."""
        return {
            "areas": list(self.areas),
            "categories": list(self.categories),
            "bbox": list(self.bbox),
            "country_code": self.country_code,
            "pairs": [[area, category] for area, category in self.pairs],
        }

    @classmethod
    def from_payload(cls, payload: Mapping) -> ImportRun:
        """The run a payload describes, checked as strictly as anything a user types."""
        try:
            areas = tuple(str(a) for a in payload["areas"])
            categories = tuple(str(c) for c in payload["categories"])
            west, south, east, north = (float(x) for x in payload["bbox"])
            country_code = payload.get("country_code")
            pairs = tuple((str(a), str(c)) for a, c in payload["pairs"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                "an import run needs areas, categories, bbox [west, south, east, north] and pairs "
                f"[[area, category], ...]: {exc}"
            ) from exc
        known = {key: parse_area_key(key) for key in areas}
        check_categories(categories)
        for area, category in pairs:
            if area not in known or category not in categories:
                raise InvalidInput(f"pair ({area}, {category}) is not one of the run's areas and categories")
        run = cls(areas, categories, (west, south, east, north), country_code, pairs)
        missing: dict[str, list[str]] = {}
        for area, category in pairs:
            missing.setdefault(area, []).append(category)
        # Only the run import_runs itself would build for these pairs: its box, categories and country follow.
        if import_runs(missing, known) != [run]:
            raise InvalidInput(
                "the import run is not the one its pairs make: one 4 x 4 block of cells or one country, "
                "categories sorted, bbox the box of its cells or the country's box"
            )
        return run


def check_categories(categories: Iterable[str]) -> tuple[str, ...]:
    """The categories, if every one is a plain lower-case Overture name; InvalidInput otherwise."""
    categories = tuple(categories)
    if not categories:
        raise InvalidInput("at least one business category is needed, e.g. 'cafe' or 'restaurant'")
    for category in categories:
        if not isinstance(category, str) or not CATEGORY_PATTERN.fullmatch(category):
            raise InvalidInput(
                f"category {category!r} is not allowed: use Overture's plain names, "
                "1 to 64 characters of a-z, 0-9 and _ (e.g. 'cafe', 'italian_restaurant')"
            )
    return categories


def _check_point(lat: float, lng: float, radius_km: float) -> None:
    for name, value, low, high in (("latitude", lat, -90, 90), ("longitude", lng, -180, 180)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidInput(f"{name} {value!r} is not a finite number; allowed: {low} to {high}")
        if not low <= value <= high:
            raise InvalidInput(f"{name} {value} is out of range; allowed: {low} to {high}")
    if radius_km not in RADII_KM or isinstance(radius_km, bool):
        allowed = ", ".join(str(r) for r in RADII_KM)
        raise InvalidInput(f"radius {radius_km!r} km is not offered; allowed: {allowed}")


def format_degrees(value: float) -> str:
    """A cell corner as JavaScript prints it: ``-2`` not ``-2.0``, ``0`` never ``-0``."""
    if value == 0:
        return "0"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def cell(lat0: float, lng0: float) -> Area:
    """The cell whose south-west corner is (lat0, lng0)."""
    return Area(
        f"cell:{format_degrees(lat0)},{format_degrees(lng0)}",
        (lng0, lat0, lng0 + CELL_DEGREES, lat0 + CELL_DEGREES),
    )


def _row(index: int) -> float:
    return index * CELL_DEGREES


def _column(index: int) -> float:
    # Python's % is already non-negative: the seed's double modulo is not needed here.
    return (index * CELL_DEGREES + 180) % 360 - 180


_LAT_ROWS = (round(-90 / CELL_DEGREES), round(90 / CELL_DEGREES) - 1)


def cell_containing(lat: float, lng: float) -> Area:
    """The cell a point falls in (a point on 90 or 180 belongs to the last row or the first column)."""
    row = min(max(math.floor(lat / CELL_DEGREES), _LAT_ROWS[0]), _LAT_ROWS[1])
    return cell(_row(row), _column(math.floor(lng / CELL_DEGREES)))


def cells_around(lat: float, lng: float, radius_km: float) -> list[Area]:
    """The cells covering a circle's bounding box, wrapped across the antimeridian, clamped at the poles."""
    _check_point(lat, lng, radius_km)
    d_lat = radius_km / KM_PER_DEGREE
    d_lng = radius_km / (KM_PER_DEGREE * max(MIN_COS_LAT, math.cos(math.radians(lat))))
    first_row = max(math.floor((lat - d_lat) / CELL_DEGREES), _LAT_ROWS[0])
    last_row = min(math.floor((lat + d_lat) / CELL_DEGREES), _LAT_ROWS[1])
    first_column = math.floor((lng - d_lng) / CELL_DEGREES)
    last_column = math.floor((lng + d_lng) / CELL_DEGREES)
    columns = dict.fromkeys(_column(i) for i in range(first_column, last_column + 1))
    return [cell(_row(row), lng0) for row in range(first_row, last_row + 1) for lng0 in columns]


def country_area(country_code: str) -> Area:
    """A whole country as one area, read in one run with a predicate on the place's address country."""
    return Area(f"country:{country_code}", country_bbox(country_code), country_code)


def parse_area_key(key: str) -> Area:
    """The area a key names: ``cell:LAT,LNG`` (a canonical south-west corner) or ``country:CC``."""
    if match := _CELL_KEY.fullmatch(key):
        lat0, lng0 = float(match[1]), float(match[2])
        area = cell(lat0, lng0)
        if area.key == key and -90 <= lat0 < 90 and -180 <= lng0 < 180:
            return area
    elif match := _COUNTRY_KEY.fullmatch(key):
        return country_area(match[1])
    raise InvalidInput(
        f"area {key!r} is not allowed: use 'cell:LAT,LNG' with the south-west corner of a 0.5 degree cell "
        "printed as JavaScript prints it (e.g. 'cell:53.5,-2', 'cell:-17.5,-180'), or 'country:CC' with an "
        "ISO 3166-1 alpha-2 code (e.g. 'country:FR')"
    )


def areas_for(targeting: Targeting) -> dict[str, Area]:
    """Every area a campaign needs: the cells around its points and its whole countries, merged by key."""
    areas: dict[str, Area] = {}
    for location in targeting.locations:
        if isinstance(location, PointLocation):
            for area in cells_around(location.lat, location.lng, location.radius_km):
                areas[area.key] = area
        else:
            area = country_area(location.country_code)
            areas[area.key] = area
    return areas


def first_area(targeting: Targeting) -> Area:
    """The area a campaign's first businesses come from: the cell holding its first location's centre, or its
    first country. Its block goes first in the import queue, for the campaign's first category."""
    location = targeting.locations[0]
    if isinstance(location, PointLocation):
        return cell_containing(location.lat, location.lng)
    return country_area(location.country_code)


def block_key(area: Area) -> str:
    """The import run an area is read in: its 4 x 4 block of cells (``block:LAT,LNG``, south-west corner) or
    its country (the area's own key)."""
    if area.country_code:
        return area.key
    west, south = area.bbox[:2]
    row, column = math.floor(south / BLOCK_DEGREES), math.floor(west / BLOCK_DEGREES)
    return f"block:{format_degrees(row * BLOCK_DEGREES)},{format_degrees(column * BLOCK_DEGREES)}"


def run_block(run: ImportRun) -> str:
    """The block (or country) an import run reads, as ``block_key`` names it."""
    return block_key(parse_area_key(run.areas[0]))


@dataclass(frozen=True)
class Cutoffs:
    """The three boundaries of the freshness rules at one moment, the only place they are worked out.

    A pair is fresh when a real release was loaded after ``fresh_after``. A mark is on its way when it was asked
    for after ``coming_after``, unless its import failed: a failure is recorded with its own time, and reads as
    failed at once, nobody waiting on it. A failed mark, or one asked for before ``coming_after`` that never
    landed (a lost run), is left alone until ``retry_after`` passes its time: the failure's block lasts exactly
    RETRY_DAYS from the failure. Missing otherwise. ``import_needs``, the store's set-based needs, its compare and
    set and ``imports status`` all compare with these, strictly after, so that exactly 35 days, 6 hours or 7 days
    old is on the older side everywhere.
    """

    fresh_after: datetime
    coming_after: datetime
    retry_after: datetime

    @classmethod
    def at(cls, now: datetime) -> Cutoffs:
        return cls(
            fresh_after=now - timedelta(days=FRESH_DAYS),
            coming_after=now - timedelta(hours=IMPORT_HOURS),
            retry_after=now - timedelta(days=RETRY_DAYS),
        )

    def state(self, release: str, imported_at: datetime, failed: bool = False, roll_out: str | None = None) -> str:
        """``fresh``, ``coming``, ``failed`` or ``missing`` for a row of place_imports (``failed``: its import's
        failure was recorded, at ``imported_at``; ``roll_out``: the release it was asked to move to now)."""
        if release != REQUESTED:
            return "fresh" if imported_at > self.fresh_after and not rolled_out(release, roll_out) else "missing"
        if imported_at > self.coming_after and not failed:
            return "coming"
        # A failed import gives nothing back; without its mark every look would start it again.
        return "failed" if imported_at > self.retry_after else "missing"

    def row_state(self, row: PlaceImport) -> str:
        """``state`` of a place_imports row."""
        return self.state(row.release, row.imported_at, row.failure is not None, row.roll_out)


def rolled_out(release: str, roll_out: str | None) -> bool:
    """Whether a loaded pair was asked to move to a newer release now, whatever its age (``imports roll-out``).

    Such a pair reads as missing, as it would at FRESH_DAYS: the import sensor asks for it with everything else
    missing, in the line's fair-share order and under the admission cap, and its run passes the drift gate as any
    other. Its mark ends the request (a failed or held import is not asked for again and again); a pair already on
    that release has moved."""
    return release != REQUESTED and roll_out is not None and roll_out != release


def last_move_at(newest_older_load: datetime | None, now: datetime) -> datetime | None:
    """When the last pair still on an older release moves to a newer one at the FRESH_DAYS pace, with no roll-out:
    FRESH_DAYS after the newest load of an older release (``newest_older_load``; None: every pair has moved), and
    never before ``now`` (a pair stale already moves when a campaign next needs it)."""
    if newest_older_load is None:
        return None
    return max(newest_older_load + timedelta(days=FRESH_DAYS), now)


def retry_allowed_at(failed_at: datetime) -> datetime:
    """When a failed pair is asked for again on its own: RETRY_DAYS after its failure (or, for a lost import,
    after it was asked for)."""
    return failed_at + timedelta(days=RETRY_DAYS)


def failure_reason(failure: str | None) -> str:
    """Why a failed pair failed, in words: the reason recorded with it, or that its import was lost."""
    return failure or LOST_IMPORT


def import_needs(
    areas: Mapping[str, Area] | Iterable[Area],
    categories: Iterable[str],
    rows: Iterable[PlaceImport],
    now: datetime,
) -> Needs:
    """Sort every (area, category) pair into fresh, on its way, failed (left alone for a week) or missing.

    An area is on its way if any of its pairs is, else missing if any is, else failed if any is; a failed
    area comes with its first failed pair's reason."""
    area_keys = list(areas) if isinstance(areas, Mapping) else [a.key for a in areas]
    categories = list(categories)
    rows = list(rows)
    by_pair = {(r.area, r.category): r for r in rows}
    cutoffs = Cutoffs.at(now)
    missing: dict[str, list[str]] = {}
    coming: set[str] = set()
    failed: dict[str, str] = {}
    for area in area_keys:
        for category in categories:
            row = by_pair.get((area, category))
            state = cutoffs.row_state(row) if row else "missing"
            if state == "coming":
                coming.add(area)
            elif state == "missing":
                missing.setdefault(area, []).append(category)
            elif state == "failed" and row:
                failed.setdefault(area, failure_reason(row.failure))
    # A search waiting for data needs the time real data landed, not when somebody asked for it.
    arrived_at = max((r.imported_at for r in rows if r.release != REQUESTED), default=None)
    failed = {area: why for area, why in failed.items() if area not in coming and area not in missing}
    return Needs(missing, coming, arrived_at, failed)


def import_runs(missing: Mapping[str, Iterable[str]], areas: Mapping[str, Area]) -> list[ImportRun]:
    """Group missing pairs into runs: one per 4 x 4 block of cells, one per country, same work same key."""
    blocks: dict[tuple[int, int], list[Area]] = {}
    runs: list[ImportRun] = []
    for key in sorted(missing):
        area = areas[key] if key in areas else parse_area_key(key)
        if area.country_code:
            categories = tuple(sorted(set(missing[key])))
            pairs = tuple((key, c) for c in categories)
            runs.append(ImportRun((key,), categories, area.bbox, area.country_code, pairs))
        else:
            west, south = area.bbox[:2]
            blocks.setdefault((math.floor(south / BLOCK_DEGREES), math.floor(west / BLOCK_DEGREES)), []).append(area)
    for _, cells in sorted(blocks.items()):
        # Keys in order and categories sorted: the same work always hashes to the same run key.
        pairs = tuple((member.key, c) for member in cells for c in sorted(set(missing[member.key])))
        categories = tuple(sorted({c for _, c in pairs}))
        bbox = (
            min(member.bbox[0] for member in cells),
            min(member.bbox[1] for member in cells),
            max(member.bbox[2] for member in cells),
            max(member.bbox[3] for member in cells),
        )
        runs.append(ImportRun(tuple(member.key for member in cells), categories, bbox, None, pairs))
    return runs


def narrowed(run: ImportRun, pairs: Iterable[tuple[str, str]]) -> ImportRun | None:
    """The run reading only these of its pairs, its box the cells they are in; None for none of them."""
    wanted = set(pairs)
    kept = [pair for pair in run.pairs if pair in wanted]
    if not kept:
        return None
    missing: dict[str, list[str]] = {}
    for area, category in kept:
        missing.setdefault(area, []).append(category)
    (narrower,) = import_runs(missing, {})
    return narrower


def campaigns_needs(
    targetings: Sequence[Targeting],
    rows: Iterable[PlaceImport],
    now: datetime,
    areas_of: Sequence[Mapping[str, Area]] | None = None,
) -> tuple[dict[str, Area], Needs]:
    """Every campaign's needs merged, so that one block is one run whichever campaigns want it.

    ``areas_of`` is each targeting's ``areas_for``, if the caller has them already. Linear in the campaigns'
    pairs: the rows are indexed once, not rescanned per campaign.
    """
    by_pair = {(r.area, r.category): r for r in rows}
    areas: dict[str, Area] = {}
    missing: dict[str, set[str]] = {}
    coming: set[str] = set()
    failed: dict[str, str] = {}
    arrived_at: datetime | None = None
    for targeting, campaign_areas in zip(targetings, areas_of or [areas_for(t) for t in targetings], strict=True):
        areas.update(campaign_areas)
        own_rows = [
            by_pair[(area, category)]
            for area in campaign_areas
            for category in targeting.categories
            if (area, category) in by_pair
        ]
        needs = import_needs(campaign_areas, targeting.categories, own_rows, now)
        for area, categories in needs.missing.items():
            missing.setdefault(area, set()).update(categories)
        coming |= needs.coming
        failed.update(needs.failed)
        if needs.arrived_at and (arrived_at is None or needs.arrived_at > arrived_at):
            arrived_at = needs.arrived_at
    merged = {area: sorted(categories) for area, categories in missing.items()}
    failed = {area: why for area, why in failed.items() if area not in coming and area not in merged}
    return areas, Needs(merged, coming, arrived_at, failed)


# A search keeps coming back while imports are pending for this long, then stops waiting for the day.
IMPORT_WAIT_HOURS = 6
SEARCH_AGAIN_MINUTES = 2
SEARCH_WINDOW_HOURS = 24
# A search asked for and not yet begun is left alone this long before it is asked for again: longer than a batch
# of ten thousand campaigns takes to reach its last one, short enough that a lost run costs one wait, not a day.
SEARCH_IN_FLIGHT = timedelta(minutes=30)


def search_due(
    window_start: datetime | None,
    last_search: datetime | None,
    pending: int,
    arrived_at: datetime | None,
    now: datetime,
) -> str | None:
    """Why a campaign's search should run now, or None: new day, still waiting on imports, or new data landed."""
    if window_start is None or last_search is None or now - window_start >= timedelta(hours=SEARCH_WINDOW_HOURS):
        return "first search of the day"
    if arrived_at is not None and arrived_at > last_search:
        return "new places landed since the last search"
    waiting = pending > 0 and now - window_start < timedelta(hours=IMPORT_WAIT_HOURS)
    if waiting and now - last_search >= timedelta(minutes=SEARCH_AGAIN_MINUTES):
        return f"{plural(pending, 'area')} still on their way"
    return None
