"""The store behind campaigns and imports, written once for DuckDB and PostgreSQL.

Every statement is written once, with ``$name`` parameters, in SQL both databases accept; a backend only
supplies a short transaction (``Store._transact``), the placeholder style and a bulk load of Arrow rows
(``Transaction``). No method holds a transaction across calls, nor across a call to another service.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    IMPORT_HOURS,
    LAUNCH_GRACE_MINUTES,
    REQUESTED,
    CountryLocation,
    Cutoffs,
    ImportRun,
    Location,
    Needs,
    PlaceImport,
    PointLocation,
    Targeting,
    areas_for,
    block_key,
    check_categories,
    import_runs,
    parse_area_key,
)
from nakodo_dagster.store.schema import MIGRATIONS

logger = logging.getLogger("nakodo_dagster")

T = TypeVar("T")

CAMPAIGN_STATUSES = ("active", "paused")
MAX_CAMPAIGN_NAME = 200
# Mean Earth radius (IUGG): haversine on this sphere is within about 0.5 % of the WGS84 geodesic.
EARTH_RADIUS_KM = 6371.0088

# The columns write_import takes from the reader's table, any others ignored. websites and phones: lists of
# strings (stored as JSON text) or JSON text already; address: one formatted line, or a struct kept as JSON.
INCOMING_COLUMNS = (
    "id",
    "area",
    "category",
    "name",
    "lat",
    "lng",
    "confidence",
    "address",
    "country",
    "websites",
    "phones",
)
_TEXT_OR_JSON_COLUMNS = ("address", "websites", "phones")
RESULT_COLUMNS = ("id", "name", "category", "lat", "lng", "distance_km", "address", "websites", "phones", "country")

_SCHEMA_VERSION = "SELECT coalesce(max(version), 0) FROM schema_migrations"

# A list of (area, category) pairs as two arrays zipped in one SELECT: one parameter, whatever the count.
_PAIRS = "(SELECT unnest($areas::TEXT[]) AS area, unnest($categories::TEXT[]) AS category)"

_IMPORT_ROWS = """
SELECT area, category, release, rows, imported_at FROM place_imports
WHERE area IN (SELECT unnest($areas::TEXT[])) AND category IN (SELECT unnest($categories::TEXT[]))
"""


def _pair_state(row: str) -> str:
    """placement.Cutoffs in SQL, for the place_imports columns of ``row`` (a table name of this module, never
    user text): the one rule for fresh, on its way, failed and missing; no row at all is missing."""
    return f"""CASE
        WHEN {row}.release IS NULL THEN 'missing'
        WHEN {row}.release <> $requested THEN CASE WHEN {row}.imported_at > $fresh_after THEN 'fresh' ELSE 'missing' END
        WHEN {row}.imported_at > $coming_after THEN 'coming'
        WHEN {row}.imported_at > $retry_after THEN 'failed'
        ELSE 'missing'
    END"""


# The compare and set: whatever comes back is ours to import, and nothing else is. The WHERE restates the
# rule from the other side (only a missing pair is taken over); $force is the analyst's deliberate override.
_ON_CONFLICT_MISSING = f"""
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, rows = 0, imported_at = excluded.imported_at
WHERE $force OR {_pair_state("place_imports")} = 'missing'
RETURNING area, category
"""

# Sorted so that two PostgreSQL callers lock overlapping rows in the same order and never deadlock.
_MARK = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT area, category, $requested, 0, $stamp FROM {_PAIRS} AS wanted
ORDER BY area, category
{_ON_CONFLICT_MISSING}
"""

# The campaigns' kept areas times their categories: every active campaign ($everyone), or exactly the campaigns
# named (a sync of one campaign, paused or not).
_CAMPAIGN_PAIRS = """
FROM campaigns AS c
JOIN campaign_areas AS ca ON ca.campaign_id = c.id
JOIN campaign_categories AS cc ON cc.campaign_id = c.id
LEFT JOIN place_imports ON place_imports.area = ca.area AND place_imports.category = cc.category
WHERE (($everyone AND c.status = 'active') OR c.id IN (SELECT unnest($campaign_ids::INTEGER[])))
"""

# The missing pairs, with the import run (block) that reads each and the oldest campaign asking for it. Merged
# after the anti-join, so that a tick sorts only what is missing, not every campaign's pairs.
_CREATE_MISSING = f"""
CREATE TEMP TABLE missing_pairs AS
SELECT ca.area, cc.category, min(ca.block) AS block, min(c.id) AS first_campaign
{_CAMPAIGN_PAIRS} AND {_pair_state("place_imports")} = 'missing'
GROUP BY ca.area, cc.category
"""

_MISSING_SUMMARY = "SELECT count(*), count(DISTINCT block) FROM missing_pairs"

# Marks on their way, found through the imported_at index rather than by joining every campaign's pairs.
_COMING_PAIRS = "SELECT count(*) FROM place_imports WHERE release = $requested AND imported_at > $coming_after"

# Admission: only the missing pairs of the first $max_runs runs, oldest campaign first, are marked; the rest
# stays missing and is asked for by a later tick.
_RESERVE_ADMITTED = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT area, category, $requested, 0, $stamp FROM missing_pairs
WHERE block IN (SELECT block FROM missing_pairs GROUP BY block ORDER BY min(first_campaign), block LIMIT $max_runs)
ORDER BY area, category
{_ON_CONFLICT_MISSING}
"""

_NEEDS_MISSING = "SELECT area, category FROM missing_pairs ORDER BY area, category"
_NEEDS_COMING = f"""
SELECT DISTINCT ca.area {_CAMPAIGN_PAIRS}
AND place_imports.release = $requested AND place_imports.imported_at > $coming_after
"""
_NEEDS_ARRIVED_AT = f"SELECT max(place_imports.imported_at) {_CAMPAIGN_PAIRS} AND place_imports.release <> $requested"

# Marks a run should exist for by now, by stamp: younger than the launch grace the run may still be being
# launched; from IMPORT_HOURS on a mark reads as failed and nobody waits on it.
_AWAITING_RUN = """
SELECT imported_at, count(*) FROM place_imports
WHERE release = $requested AND imported_at > $coming_after AND imported_at <= $launched_before
GROUP BY imported_at ORDER BY imported_at
"""

_STAMPED = "SELECT area, category FROM place_imports WHERE release = $requested AND imported_at = $stamp"

# Kept monotonic: a change noted by a slow transaction never hides a later one.
_NOTE_NEEDS_CHANGED = """
INSERT INTO needs_changes (id, changed_at) VALUES (1, $changed_at)
ON CONFLICT (id) DO UPDATE SET changed_at = greatest(needs_changes.changed_at, excluded.changed_at)
"""

_NEEDS_CHANGED_SINCE = "SELECT count(*) FROM needs_changes WHERE changed_at > $since"

# A real release or a failed mark that aged into missing since $since: the other ways a pair becomes missing
# (a new campaign, a mark taken back) are noted in needs_changes.
_AGED_INTO_MISSING = """
SELECT count(*) FROM (
    SELECT 1 FROM place_imports
    WHERE (release <> $requested AND imported_at > $fresh_after_then AND imported_at <= $fresh_after)
       OR (release = $requested AND imported_at > $retry_after_then AND imported_at <= $retry_after)
    LIMIT 1
) AS aged
"""

# Keyed on the exact stamp this caller wrote: never another caller's mark, even on the same pair.
_TAKE_BACK = f"""
DELETE FROM place_imports USING {_PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND place_imports.release = $requested AND place_imports.imported_at = $stamp
RETURNING place_imports.area
"""

# Keyed, like the take-back, on the run's exact stamp: an analyst's or a newer tick's mark on the same pair is
# another import on its way and stays as it is.
_MARK_FAILED = f"""
UPDATE place_imports SET imported_at = $failed_at FROM {_PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND place_imports.release = $requested AND place_imports.imported_at = $stamp
  AND place_imports.imported_at > $failed_at
RETURNING place_imports.area
"""

_DELETE_PLACES = f"""
DELETE FROM places USING {_PAIRS} AS pair
WHERE places.area = pair.area AND places.category = pair.category
"""

_CREATE_INCOMING = """
CREATE TEMP TABLE incoming_places (
    id TEXT, area TEXT, category TEXT, name TEXT, lat DOUBLE PRECISION, lng DOUBLE PRECISION,
    confidence DOUBLE PRECISION, address TEXT, country TEXT, websites TEXT, phones TEXT
)
"""

# The join on the run's pairs is what keeps a run from writing a pair somebody else reserved.
_INSERT_PLACES = f"""
INSERT INTO places (area, category, id, name, lat, lng, confidence, address, country, websites, phones, release)
SELECT i.area, i.category, i.id, i.name, i.lat, i.lng, i.confidence, i.address, i.country, i.websites,
       i.phones, $release
FROM incoming_places AS i JOIN {_PAIRS} AS pair ON pair.area = i.area AND pair.category = i.category
"""

# Every pair is recorded, with zero rows if need be: "this area has no cafes" is a result.
_RECORD_IMPORTS = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT pair.area, pair.category, $release, count(i.id), $now
FROM {_PAIRS} AS pair
LEFT JOIN incoming_places AS i ON i.area = pair.area AND i.category = pair.category
GROUP BY pair.area, pair.category
ORDER BY pair.area, pair.category
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, rows = excluded.rows, imported_at = excluded.imported_at
RETURNING area, category, rows
"""

_STAMP_IMPORTS = f"""
UPDATE place_imports SET imported_at = $committed_at FROM {_PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
"""

_COUNT_PLACES = f"""
SELECT places.area, places.category, count(*)
FROM places JOIN {_PAIRS} AS pair ON places.area = pair.area AND places.category = pair.category
GROUP BY places.area, places.category
"""

_CAMPAIGN_COLUMNS = "id, name, targeting, status, created_at"

# Searches ------------------------------------------------------------------------------------------------

# A loaded pair's imported_at (and a noted change) is stamped just before its commit, and a PostgreSQL statement
# does not see a commit that lands after the statement began: a pair stamped shortly before a search or a sensor
# tick began may be invisible to it. So each vouches only for what was stamped this long before it began, and the
# next one reads that stretch again (harmless: each business is added once, a pair recounted twice counts once).
# The margin also absorbs clock drift between the writer's machine and the reader's.
COMMIT_OVERLAP = timedelta(minutes=1)
# What a campaign's first search, or its first after its targeting changed, reads: everything loaded.
_EVER = datetime(1970, 1, 1, tzinfo=UTC)

_SEARCH_STATE = """
SELECT c.targeting, s.searched_targeting, s.searched_through, s.businesses
FROM campaigns AS c LEFT JOIN campaign_searches AS s ON s.campaign_id = c.id
WHERE c.id = $campaign_id
"""

# The campaign's pairs loaded since $since, through the index on imported_at: with nothing new this is one short
# range scan, whatever is loaded.
_LANDED_PAIRS = """
SELECT pi.area, pi.category, cc.rank
FROM place_imports AS pi
JOIN campaign_areas AS ca ON ca.area = pi.area AND ca.campaign_id = $campaign_id
JOIN campaign_categories AS cc ON cc.category = pi.category AND cc.campaign_id = $campaign_id
WHERE pi.imported_at > $since AND pi.release <> $requested
"""


def _haversine_km(point: int) -> str:
    """Haversine from a place ``p`` to the campaign's point number ``point`` (parameters $lat_N, $lng_N)."""
    lat, lng = f"$lat_{point}", f"$lng_{point}"
    return f"""2 * {EARTH_RADIUS_KM} * asin(sqrt(least(CAST(1 AS FLOAT8),
        power(sin(radians({lat} - p.lat) / 2), 2)
        + cos(radians(p.lat)) * cos(radians({lat})) * power(sin(radians({lng} - p.lng) / 2), 2))))"""


def _find_businesses(points: int) -> str:
    """The landed pairs' places the campaign wants and has not got, into the temp table found_businesses.

    Distance to the nearest point location whose radius holds the place, in one pass over the places: one term
    per point (a campaign has a handful), where a join with the points and a grouping back cost three times as
    much at a million places. A country location matches a place its country's import read (area country:CC)
    with that address country. A place of several wanted categories is kept once, under the campaign's first.
    """
    km = ", ".join(f"{_haversine_km(i)} AS km_{i}" for i in range(points))
    within = ", ".join(f"CASE WHEN km_{i} <= $radius_{i} THEN km_{i} END" for i in range(points))
    return f"""
CREATE TEMP TABLE found_businesses AS
WITH pair AS (
    SELECT unnest($areas::TEXT[]) AS area, unnest($categories::TEXT[]) AS category,
           unnest($ranks::INTEGER[]) AS rank
),
measured AS (
    SELECT p.id, p.name, p.category, p.lat, p.lng, p.address, p.websites, p.phones, p.country, p.area, pair.rank
           {", " + km if points else ""}
    FROM pair JOIN places AS p ON p.area = pair.area AND p.category = pair.category
),
matched AS (
    SELECT *, {f"least({within})" if points else "CAST(NULL AS FLOAT8)"} AS distance_km FROM measured
),
ranked AS (
    SELECT id, name, category, lat, lng, distance_km, address, websites, phones, country,
           row_number() OVER (PARTITION BY id ORDER BY rank, distance_km NULLS LAST, area) AS choice
    FROM matched
    WHERE distance_km IS NOT NULL
       OR (area = 'country:' || country AND country IN (SELECT unnest($countries::TEXT[])))
)
SELECT id, name, category, lat, lng, distance_km, address, websites, phones, country FROM ranked
WHERE choice = 1 AND NOT EXISTS (
    SELECT 1 FROM campaign_businesses AS b WHERE b.campaign_id = $campaign_id AND b.place_id = ranked.id
)
"""


# Unordered: results are sorted when read, and sorting 600,000 rows here cost a second. The conflict clause is for
# a search of the same campaign committing meanwhile (PostgreSQL); the first to add a business keeps it.
_ADD_FOUND_BUSINESSES = """
INSERT INTO campaign_businesses (
    campaign_id, place_id, name, category, lat, lng, distance_km, address, websites, phones, country, added_at
)
SELECT $campaign_id, id, name, category, lat, lng, distance_km, address, websites, phones, country, $now
FROM found_businesses
ON CONFLICT (campaign_id, place_id) DO NOTHING
"""

_COUNT_FOUND = "SELECT count(*) FROM found_businesses"
_COUNT_BUSINESSES = "SELECT count(*) FROM campaign_businesses WHERE campaign_id = $campaign_id"

_RECORD_SEARCH = """
INSERT INTO campaign_searches (campaign_id, searched_at, searched_through, searched_targeting, businesses)
VALUES ($campaign_id, $now, $through, $targeting, $businesses)
ON CONFLICT (campaign_id) DO UPDATE
SET searched_at = excluded.searched_at, searched_through = excluded.searched_through,
    searched_targeting = excluded.searched_targeting, businesses = excluded.businesses
"""

# Every chosen campaign's areas by the state the map colours them with (on its way, then missing, then failed,
# else loaded), with the newest real import among its pairs, beside its search's times. One statement for all.
_PROGRESS_COUNTS = f"""
WITH chosen AS (
    SELECT id FROM campaigns
    WHERE ($everyone AND status = 'active') OR id IN (SELECT unnest($campaign_ids::INTEGER[]))
),
pair_states AS (
    SELECT ca.campaign_id, ca.area, {_pair_state("place_imports")} AS state,
           CASE WHEN place_imports.release <> $requested THEN place_imports.imported_at END AS landed_at
    FROM chosen
    JOIN campaign_areas AS ca ON ca.campaign_id = chosen.id
    JOIN campaign_categories AS cc ON cc.campaign_id = chosen.id
    LEFT JOIN place_imports ON place_imports.area = ca.area AND place_imports.category = cc.category
),
area_states AS (
    SELECT campaign_id, area, bool_or(state = 'coming') AS coming, bool_or(state = 'missing') AS missing,
           bool_or(state = 'failed') AS failed, max(landed_at) AS landed_at
    FROM pair_states GROUP BY campaign_id, area
)
SELECT chosen.id AS campaign_id, count(a.area) AS areas,
       count(a.area) FILTER (WHERE a.coming) AS coming,
       count(a.area) FILTER (WHERE a.missing AND NOT a.coming) AS missing,
       count(a.area) FILTER (WHERE a.missing) AS not_loaded,
       count(a.area) FILTER (WHERE a.failed AND NOT a.coming AND NOT a.missing) AS failed,
       max(a.landed_at) AS arrived_at
FROM chosen
LEFT JOIN area_states AS a ON a.campaign_id = chosen.id
GROUP BY chosen.id
"""


_PROGRESS_COLUMNS = "campaign_id, areas, coming, missing, not_loaded, failed, arrived_at"

_SEARCH_PROGRESS = f"""
SELECT counts.campaign_id, c.name, counts.areas, counts.coming, counts.missing, counts.not_loaded, counts.failed,
       counts.arrived_at, s.window_start, s.requested_at, s.searched_at
FROM ({_PROGRESS_COUNTS}) AS counts
JOIN campaigns AS c ON c.id = counts.campaign_id
LEFT JOIN campaign_searches AS s ON s.campaign_id = counts.campaign_id
ORDER BY counts.campaign_id
"""

# Sorted ids: two callers lock overlapping rows in the same order (PostgreSQL).
_KEEP_PROGRESS = f"""
INSERT INTO campaign_progress ({_PROGRESS_COLUMNS})
SELECT {_PROGRESS_COLUMNS} FROM ({_PROGRESS_COUNTS}) AS counts ORDER BY campaign_id
ON CONFLICT (campaign_id) DO UPDATE
SET areas = excluded.areas, coming = excluded.coming, missing = excluded.missing,
    not_loaded = excluded.not_loaded, failed = excluded.failed, arrived_at = excluded.arrived_at
"""

_FORGET_INACTIVE_PROGRESS = """
DELETE FROM campaign_progress WHERE campaign_id IN (SELECT id FROM campaigns WHERE status <> 'active')
"""

_KEPT_PROGRESS = """
SELECT p.campaign_id, c.name, p.areas, p.coming, p.missing, p.not_loaded, p.failed, p.arrived_at,
       s.window_start, s.requested_at, s.searched_at
FROM campaign_progress AS p
JOIN campaigns AS c ON c.id = p.campaign_id AND c.status = 'active'
LEFT JOIN campaign_searches AS s ON s.campaign_id = p.campaign_id
ORDER BY p.campaign_id
"""

# The campaigns holding a pair that was asked for or loaded since $since, or that crossed one of the freshness
# boundaries since then (placement.Cutoffs at $since, the *_then parameters, and at now): through the index on
# imported_at, so a tick reads what changed, not every campaign's pairs.
_CHANGED_CAMPAIGNS = """
SELECT DISTINCT ca.campaign_id
FROM place_imports AS pi
JOIN campaign_areas AS ca ON ca.area = pi.area
JOIN campaign_categories AS cc ON cc.campaign_id = ca.campaign_id AND cc.category = pi.category
WHERE pi.imported_at > $since
   OR (pi.imported_at > $fresh_after_then AND pi.imported_at <= $fresh_after)
   OR (pi.imported_at > $coming_after_then AND pi.imported_at <= $coming_after)
   OR (pi.imported_at > $retry_after_then AND pi.imported_at <= $retry_after)
"""

# Sorted ids: two callers lock overlapping rows in the same order (PostgreSQL).
_REQUEST_SEARCHES = """
INSERT INTO campaign_searches (campaign_id, window_start, requested_at)
SELECT id, CASE WHEN id IN (SELECT unnest($new_windows::INTEGER[])) THEN $now END, $now
FROM (SELECT unnest($campaign_ids::INTEGER[]) AS id) AS requested
ORDER BY id
ON CONFLICT (campaign_id) DO UPDATE
SET requested_at = excluded.requested_at,
    window_start = coalesce(excluded.window_start, campaign_searches.window_start)
"""

_REMEMBER_MAPS = """
UPDATE campaign_searches SET map_key = shown.map_key
FROM (SELECT unnest($campaign_ids::INTEGER[]) AS campaign_id, unnest($map_keys::TEXT[]) AS map_key) AS shown
WHERE campaign_searches.campaign_id = shown.campaign_id
  AND (campaign_searches.map_key IS NULL OR campaign_searches.map_key <> shown.map_key)
RETURNING campaign_searches.campaign_id
"""

_CAMPAIGN_POINTS = """
SELECT lat, lng FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, place_id LIMIT $limit
"""


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


# ----------------------------------------------------------------------------------------------------- Searches

_CAMPAIGN_RESULTS = f"""
SELECT place_id, {", ".join(RESULT_COLUMNS[1:])} FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, name NULLS LAST, place_id
"""

# The same four answers import_needs gives, counted per category; a failed mark past its week is due again.
_IMPORT_STATUS = f"""
SELECT category,
       count(*) FILTER (WHERE state = 'fresh'),
       count(*) FILTER (WHERE state = 'coming'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'missing'),
       min(imported_at) FILTER (WHERE release <> $requested)
FROM (SELECT category, release, imported_at, {_pair_state("place_imports")} AS state FROM place_imports) AS rows
GROUP BY category ORDER BY category
"""

# Only a mark that is no longer on its way goes: a mark on its way, a real release, or a mark another caller
# wrote a moment ago fails the WHERE and stays.
_FORGET_FAILED_IMPORT = """
DELETE FROM place_imports
WHERE area = $area AND category = $category AND release = $requested AND imported_at <= $coming_after
RETURNING area, category, release, rows, imported_at
"""

# What a campaign needs, kept when it is created or changed (placement.areas_for): the sensors join on it.
_KEEP_CAMPAIGN_AREAS = """
INSERT INTO campaign_areas (campaign_id, area, block)
SELECT $campaign_id, unnest($areas::TEXT[]), unnest($blocks::TEXT[])
ON CONFLICT (campaign_id, area) DO NOTHING
"""
_KEEP_CAMPAIGN_CATEGORIES = """
INSERT INTO campaign_categories (campaign_id, category, rank)
SELECT $campaign_id, unnest($categories::TEXT[]), unnest($ranks::INTEGER[])
"""

_PLACE_NAME_COLUMNS = "query, display_name, lat, lng, looked_up_at"

# The version whose tables keep each campaign's needs (campaign_areas, campaign_categories).
_CAMPAIGN_NEEDS_VERSION = 3


@functools.cache
def _parameter_names(sql: str) -> frozenset[str]:
    return frozenset(re.findall(r"\$([A-Za-z_]\w*)", sql))


class Transaction(ABC):
    """One open transaction: the only way the store's SQL reaches a database."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def _translate(self, sql: str) -> str:
        """The statement in the driver's placeholder style; ``$name`` is DuckDB's own."""
        return sql

    def run(self, sql: str, **params: Any) -> None:
        """Execute one statement with those of ``params`` it names (DuckDB refuses any other)."""
        named = _parameter_names(sql)
        self._cursor.execute(self._translate(sql), {name: value for name, value in params.items() if name in named})

    def rows(self, sql: str, **params: Any) -> list[tuple]:
        """Execute one statement and return its rows."""
        self.run(sql, **params)
        return self._cursor.fetchall()

    @abstractmethod
    def load_incoming_places(self, places: pa.Table) -> None:
        """Bulk-load normalised rows (``INCOMING_COLUMNS``, in order) into the temp table incoming_places."""


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

# Coverage: the pairs active campaigns need (each once, however many campaigns share it) by the one freshness
# rule, every state counted and its first $listed pairs listed, oldest first. One statement, whatever the campaigns.
_COVERAGE = f"""
WITH needed AS (
    SELECT DISTINCT ca.area, cc.category, place_imports.release, place_imports.imported_at,
           {_pair_state("place_imports")} AS state
    {_CAMPAIGN_PAIRS}
),
ranked AS (
    SELECT state, area, category, release, imported_at, count(*) OVER (PARTITION BY state) AS pairs,
           row_number() OVER (PARTITION BY state ORDER BY imported_at NULLS FIRST, area, category) AS position
    FROM needed
)
SELECT state, pairs, area, category, release, imported_at FROM ranked WHERE position <= greatest($listed, 1)
ORDER BY state, position
"""


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


def _pair_params(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    # Unique, as DuckDB refuses to update one row twice in a statement. Not sorted: the order rows are locked in
    # is the statement's (the reservation sorts in SQL), and sorting a big tick's pairs in Python took a second.
    unique = list(dict.fromkeys(pairs))
    return {"areas": [a for a, _ in unique], "categories": [c for _, c in unique]}


def _by_area(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for area, category in pairs:
        grouped.setdefault(area, []).append(category)
    return {area: sorted(grouped[area]) for area in sorted(grouped)}


def _incoming(places: pa.Table) -> pa.Table:
    """The rows to write, with exactly ``INCOMING_COLUMNS``; list or struct columns become JSON text."""
    absent = [name for name in INCOMING_COLUMNS if name not in places.column_names]
    if absent:
        raise InvalidInput(f"places table lacks columns {absent}; needed: {list(INCOMING_COLUMNS)}")
    rows = places.select(list(INCOMING_COLUMNS))
    text = (pa.types.is_string, pa.types.is_large_string)
    to_json = [n for n in _TEXT_OR_JSON_COLUMNS if not any(is_text(rows.schema.field(n).type) for is_text in text)]
    if not to_json:
        return rows
    # Column names come from INCOMING_COLUMNS, never from the caller.
    select = ", ".join(f"to_json({name})::VARCHAR AS {name}" if name in to_json else name for name in INCOMING_COLUMNS)
    with duckdb.connect() as memory:
        memory.register("incoming", rows)
        return memory.execute(f"SELECT {select} FROM incoming").to_arrow_table()


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


def _campaign(row: tuple) -> Campaign:
    id_, name, targeting, status, created_at = row
    return Campaign(id_, name, targeting_from_json(targeting), status, created_at)


def _result(row: tuple) -> dict[str, Any]:
    result = dict(zip(RESULT_COLUMNS, row, strict=True))
    for name in ("websites", "phones"):
        if result[name] is not None:
            result[name] = json.loads(result[name])
    return result


def _rule(now: datetime) -> dict[str, Any]:
    """The parameters of ``_pair_state``: the freshness boundaries at ``now``, from placement.Cutoffs."""
    return {"requested": REQUESTED, **asdict(Cutoffs.at(now))}


def _rule_since(since: datetime, now: datetime) -> dict[str, Any]:
    """``_rule(now)`` and the same boundaries at ``since`` (``*_then``): what crossed one in between."""
    then = {f"{name}_then": value for name, value in asdict(Cutoffs.at(since)).items()}
    return {**_rule(now), **then, "since": since}


def _note_needs_changed(tx: Transaction) -> None:
    # The transaction's last statement, stamped as late as possible: a sensor tick that began before this commit
    # and did not see it looks again (it reads changes from COMMIT_OVERLAP before its own start).
    tx.run(_NOTE_NEEDS_CHANGED, changed_at=datetime.now(UTC))


def _campaign_filter(campaign_ids: Sequence[int] | None) -> dict[str, Any]:
    if campaign_ids is None:
        return {"everyone": True, "campaign_ids": []}
    return {"everyone": False, "campaign_ids": [_check_campaign_id(i) for i in campaign_ids]}


def _keep_campaign_areas(tx: Transaction, campaign_id: int, targeting: Targeting) -> None:
    """Keep the areas the targeting needs beside the campaign (those it keeps already stay as they are)."""
    areas = areas_for(targeting)
    tx.run(
        _KEEP_CAMPAIGN_AREAS,
        campaign_id=campaign_id,
        areas=list(areas),
        blocks=[block_key(area) for area in areas.values()],
    )


def _keep_campaign_needs(tx: Transaction, campaign_id: int, targeting: Targeting) -> None:
    """Keep a new campaign's areas and its categories in the campaign's own order."""
    _keep_campaign_areas(tx, campaign_id, targeting)
    ordered = list(dict.fromkeys(targeting.categories))
    tx.run(_KEEP_CAMPAIGN_CATEGORIES, campaign_id=campaign_id, categories=ordered, ranks=list(range(len(ordered))))


class Store(ABC):
    """place_imports, places, campaigns and campaign_businesses, in one database."""

    # Serialises migrators that reach the database at the same moment; None where the backend already does.
    _MIGRATION_LOCK: str | None = None

    @abstractmethod
    def _transact(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` in one short transaction: committed if it returns, rolled back if it raises."""

    # Schema

    def migrate(self) -> None:
        """Create or upgrade the tables to the newest schema; safe to repeat and to run from many processes."""

        def work(tx: Transaction) -> None:
            if self._MIGRATION_LOCK:
                tx.rows(self._MIGRATION_LOCK)
            tx.run(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
            )
            [(reached,)] = tx.rows(_SCHEMA_VERSION)
            for version, statements in MIGRATIONS:
                if version > reached:
                    for statement in statements:
                        tx.run(statement)
                    tx.run(
                        "INSERT INTO schema_migrations (version, applied_at) VALUES ($version, $now)",
                        version=version,
                        now=datetime.now(UTC),
                    )
            if reached < _CAMPAIGN_NEEDS_VERSION:
                # Campaigns older than the tables that keep their needs: their areas come from Python.
                for campaign in tx.rows(f"SELECT {_CAMPAIGN_COLUMNS} FROM campaigns"):
                    campaign = _campaign(campaign)
                    _keep_campaign_needs(tx, campaign.id, campaign.targeting)

        self._transact(work)

    def schema_version(self) -> int:
        """The newest migration this database has applied."""
        return self._transact(lambda tx: tx.rows(_SCHEMA_VERSION)[0][0])

    # The freshness table

    def import_rows(self, areas: Iterable[str], categories: Iterable[str]) -> list[PlaceImport]:
        """What place_imports says about every (area, category) pair of these areas and categories."""
        params = {"areas": sorted(set(areas)), "categories": sorted(set(categories))}
        rows = self._transact(lambda tx: tx.rows(_IMPORT_ROWS, **params))
        return [PlaceImport(*row) for row in rows]

    def reserve(self, missing: Mapping[str, Iterable[str]], stamp: datetime, now: datetime) -> dict[str, list[str]]:
        """Mark missing pairs as requested where nobody else has; the pairs returned are ours to import."""
        pairs = [(area, category) for area, categories in missing.items() for category in categories]
        return _by_area(self._mark(pairs, stamp, now, force=False))

    def force_request(self, pairs: Iterable[tuple[str, str]], now: datetime) -> datetime:
        """The analyst's override: mark pairs as requested whatever their age; returns the marks' stamp."""
        self._mark(pairs, now, now, force=True)
        return now

    def _mark(
        self, pairs: Iterable[tuple[str, str]], stamp: datetime, now: datetime, *, force: bool
    ) -> list[tuple[str, str]]:
        params = _pair_params(pairs)
        if not params["areas"]:
            return []
        return self._transact(lambda tx: tx.rows(_MARK, **params, **_rule(now), stamp=stamp, force=force))

    def take_back(self, pairs: Iterable[tuple[str, str]], stamp: datetime) -> int:
        """Delete this caller's unused marks (its exact stamp) so the next look asks again; returns how many."""
        params = _pair_params(pairs)
        if not params["areas"]:
            return 0
        return len(self._rows_changing_needs(_TAKE_BACK, **params, requested=REQUESTED, stamp=stamp))

    def mark_failed(self, pairs: Iterable[tuple[str, str]], stamp: datetime, now: datetime) -> int:
        """Date a failed import's own marks (its exact ``stamp``) back so campaigns stop waiting now; the 7-day
        block runs from there. Returns how many marks were dated back."""
        params = _pair_params(pairs)
        if not params["areas"]:
            return 0
        # A mark older than IMPORT_HOURS already reads as failed: moving it would only shorten its block.
        failed_at = now - timedelta(hours=IMPORT_HOURS)
        return len(
            self._rows_changing_needs(_MARK_FAILED, **params, requested=REQUESTED, stamp=stamp, failed_at=failed_at)
        )

    def _rows_changing_needs(self, sql: str, **params: Any) -> list[tuple]:
        """The rows a statement returns; if it returns any, the change is noted for the sensors."""

        def work(tx: Transaction) -> list[tuple]:
            rows = tx.rows(sql, **params)
            if rows:
                _note_needs_changed(tx)
            return rows

        return self._transact(work)

    def needs_changed_since(self, since: datetime, now: datetime) -> bool:
        """Whether a pair may have become missing after ``since``: a noted change (a campaign added or changed,
        a mark taken back or dated back), or a release or a failed mark aging past its boundary."""

        def work(tx: Transaction) -> bool:
            [(noted,)] = tx.rows(_NEEDS_CHANGED_SINCE, since=since)
            if noted:
                return True
            [(aged,)] = tx.rows(_AGED_INTO_MISSING, **_rule_since(since, now))
            return bool(aged)

        return self._transact(work)

    # Asking for imports

    def reserve_missing(self, now: datetime, max_runs: int, campaign_ids: Sequence[int] | None = None) -> Reservation:
        """Mark the missing pairs of at most ``max_runs`` import runs, in the database, and group what we got.

        The pairs come from the campaigns' kept areas and categories (every active campaign, or exactly
        ``campaign_ids``), anti-joined with place_imports under the one freshness rule; the runs of the oldest
        campaigns go first. ``max_runs=0`` reserves nothing and only counts.
        """
        if max_runs < 0:
            raise InvalidInput(f"max_runs {max_runs!r} is not allowed: use 0 or more")
        rule, campaigns = _rule(now), _campaign_filter(campaign_ids)

        def work(tx: Transaction) -> tuple[int, int, int, list[tuple]]:
            tx.run(_CREATE_MISSING, **rule, **campaigns)
            [(missing_pairs, missing_runs)] = tx.rows(_MISSING_SUMMARY)
            [(coming_pairs,)] = tx.rows(_COMING_PAIRS, **rule)
            reserved = (
                tx.rows(_RESERVE_ADMITTED, **rule, stamp=now, force=False, max_runs=max_runs)
                if max_runs and missing_pairs
                else []
            )
            return missing_pairs, missing_runs, coming_pairs, reserved

        missing_pairs, missing_runs, coming_pairs, reserved = self._transact(work)
        by_area = _by_area(reserved)
        runs = import_runs(by_area, {key: parse_area_key(key) for key in by_area})
        return Reservation(now, runs, missing_runs, missing_pairs, coming_pairs)

    def needs(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> Needs:
        """``placement.import_needs`` of the campaigns' pairs merged, computed by the database."""
        params = {**_rule(now), **_campaign_filter(campaign_ids)}

        def work(tx: Transaction) -> Needs:
            tx.run(_CREATE_MISSING, **params)
            missing = _by_area(tx.rows(_NEEDS_MISSING))
            coming = {area for (area,) in tx.rows(_NEEDS_COMING, **params)}
            [(arrived_at,)] = tx.rows(_NEEDS_ARRIVED_AT, **params)
            return Needs(missing, coming, arrived_at)

        return self._transact(work)

    def coverage(self, now: datetime, listed: int) -> Coverage:
        """The pairs active campaigns need, by the one freshness rule at ``now``: counted per state, and at most
        ``listed`` of each state (0 lists none), oldest first. Pairs no campaign needs are left out."""
        if listed < 0:
            raise InvalidInput(f"listed {listed!r} is not allowed: use 0 or more")
        params = {**_rule(now), **_campaign_filter(None), "listed": listed}
        rows = self._transact(lambda tx: tx.rows(_COVERAGE, **params))
        counts = dict.fromkeys(PAIR_STATES, 0) | {state: pairs for state, pairs, *_ in rows}
        pairs = [NeededPair(area, category, state, release, at) for state, _, area, category, release, at in rows]
        by_state = {state: [pair for pair in pairs if pair.state == state][:listed] for state in PAIR_STATES}
        return Coverage(counts, [pair for state in PAIR_STATES for pair in by_state[state]])

    def marks_awaiting_run(self, now: datetime) -> dict[datetime, int]:
        """The stamps of marks whose run should exist by now (past the launch grace, not yet failed), and how
        many marks carry each."""
        launched_before = now - timedelta(minutes=LAUNCH_GRACE_MINUTES)
        return dict(self._transact(lambda tx: tx.rows(_AWAITING_RUN, **_rule(now), launched_before=launched_before)))

    def marks_stamped(self, stamp: datetime) -> list[tuple[str, str]]:
        """The pairs whose mark carries exactly this stamp."""
        return self._transact(lambda tx: tx.rows(_STAMPED, requested=REQUESTED, stamp=stamp))

    # Imports

    def write_import(
        self, run: ImportRun, release: str, places: pa.Table, now: datetime | None = None
    ) -> dict[tuple[str, str], int]:
        """Replace the places of the run's pairs and record the release, all at once; returns rows per pair.

        ``imported_at`` is ``now`` if given, else the moment just before the commit, when the places become
        visible: a search that ran while this import was reading must still find them new afterwards.
        """
        if not isinstance(release, str) or not release or release == REQUESTED:
            raise InvalidInput(f"release {release!r} is not allowed: use an Overture release name, e.g. 2026-11-18.0")
        params = _pair_params(run.pairs)
        if not params["areas"]:
            return {}
        incoming = _incoming(places)

        def work(tx: Transaction) -> list[tuple]:
            tx.run(_CREATE_INCOMING)
            tx.load_incoming_places(incoming)
            # Recorded first: the upsert locks the pairs' rows, so a second writer of the same pairs (an analyst's
            # re-materialisation) waits for this one and then replaces its places rather than colliding with them.
            recorded = tx.rows(_RECORD_IMPORTS, **params, release=release, now=now or datetime.now(UTC))
            tx.run(_DELETE_PLACES, **params)
            tx.run(_INSERT_PLACES, **params, release=release)
            if now is None:
                tx.run(_STAMP_IMPORTS, **params, committed_at=datetime.now(UTC))
            return recorded

        return {(area, category): rows for area, category, rows in self._transact(work)}

    def count_places(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """How many places are loaded for each of these pairs (pairs with none are left out)."""
        params = _pair_params(pairs)
        rows = self._transact(lambda tx: tx.rows(_COUNT_PLACES, **params))
        return {(area, category): count for area, category, count in rows}

    def forget_failed_import(self, area: str, category: str, now: datetime) -> PlaceImport | None:
        """The analyst's override of the 7-day block: delete the pair's failed mark, so the next look asks again.

        Returns the mark deleted, or None when the pair had no failed mark to forget (never asked for, an import
        on its way, or a real release loaded): those stay as they are.
        """
        area = parse_area_key(area).key
        (category,) = check_categories([category])
        rows = self._rows_changing_needs(_FORGET_FAILED_IMPORT, area=area, category=category, **_rule(now))
        return PlaceImport(*rows[0]) if rows else None

    def import_status(self, now: datetime) -> list[ImportStatus]:
        """Per category, how many pairs are fresh, on their way, failed or stale, and the oldest release."""
        rows = self._transact(lambda tx: tx.rows(_IMPORT_STATUS, **_rule(now)))
        return [ImportStatus(*row) for row in rows]

    # Campaigns

    def add_campaign(self, name: str, targeting: Targeting, *, now: datetime | None = None) -> int:
        """Create an active campaign; returns its id."""
        name = check_campaign_name(name)
        if not isinstance(targeting, Targeting):
            raise InvalidInput(f"targeting {targeting!r} is not a Targeting of locations and categories")
        params = {"name": name, "targeting": targeting_to_json(targeting), "now": now or datetime.now(UTC)}

        def work(tx: Transaction) -> int:
            [(campaign_id,)] = tx.rows(
                "INSERT INTO campaigns (name, targeting, created_at) VALUES ($name, $targeting, $now) RETURNING id",
                **params,
            )
            _keep_campaign_needs(tx, campaign_id, targeting)
            _note_needs_changed(tx)
            return campaign_id

        return self._transact(work)

    def campaign(self, campaign_id: int) -> Campaign:
        """The campaign with this id."""
        return self._transact(lambda tx: self._campaign_in(tx, campaign_id))

    def _campaign_in(self, tx: Transaction, campaign_id: int) -> Campaign:
        rows = tx.rows(f"SELECT {_CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $id", id=_check_campaign_id(campaign_id))
        if not rows:
            raise _no_campaign(campaign_id)
        return _campaign(rows[0])

    def campaigns(self, active_only: bool = False) -> list[Campaign]:
        """Every campaign, oldest first; only those whose search runs if ``active_only``."""
        statuses = ["active"] if active_only else list(CAMPAIGN_STATUSES)
        rows = self._transact(
            lambda tx: tx.rows(
                f"SELECT {_CAMPAIGN_COLUMNS} FROM campaigns WHERE status IN (SELECT unnest($statuses::TEXT[])) "
                "ORDER BY id",
                statuses=statuses,
            )
        )
        return [_campaign(row) for row in rows]

    def set_campaign_status(self, campaign_id: int, status: str) -> None:
        """Pause or resume a campaign's search."""
        if status not in CAMPAIGN_STATUSES:
            raise InvalidInput(f"status {status!r} is not allowed; allowed: {', '.join(CAMPAIGN_STATUSES)}")

        def work(tx: Transaction) -> None:
            # No RETURNING: DuckDB runs UPDATE ... RETURNING as a delete and an insert, which the foreign key from
            # the campaign's businesses refuses.
            tx.run(
                "UPDATE campaigns SET status = $status WHERE id = $id",
                status=status,
                id=_check_campaign_id(campaign_id),
            )
            self._campaign_in(tx, campaign_id)
            _note_needs_changed(tx)

        self._transact(work)

    def add_campaign_location(self, campaign_id: int, location: Location) -> Campaign:
        """Add a point or a country to a campaign's targeting: its next imports and searches look there too."""
        if not isinstance(location, PointLocation | CountryLocation):
            raise InvalidInput(f"location {location!r} is not a point with a radius nor a country")

        def work(tx: Transaction) -> Campaign:
            # Touching the row first locks it until commit in PostgreSQL (DuckDB holds the whole file), so two
            # locations added at once are added one after the other and neither is lost. Without RETURNING, as in
            # set_campaign_status.
            tx.run("UPDATE campaigns SET targeting = targeting WHERE id = $id", id=_check_campaign_id(campaign_id))
            campaign = self._campaign_in(tx, campaign_id)
            if location in campaign.targeting.locations:
                raise InvalidInput(f"campaign {campaign_id} already targets this location; `campaign show` lists them")
            targeting = Targeting((*campaign.targeting.locations, location), campaign.targeting.categories)
            tx.run(
                "UPDATE campaigns SET targeting = $targeting WHERE id = $id",
                targeting=targeting_to_json(targeting),
                id=campaign.id,
            )
            _keep_campaign_areas(tx, campaign.id, Targeting((location,), targeting.categories))
            _note_needs_changed(tx)
            return replace(campaign, targeting=targeting)

        return self._transact(work)

    # Searches ----------------------------------------------------------------------------------------------

    def add_campaign_businesses(self, campaign_id: int, now: datetime) -> tuple[int, int]:
        """Search the campaign: add the businesses of the pairs loaded since its last search (all of them the
        first time, or after its targeting changed); returns (added, total).

        ``now`` is when the search began: it vouches for what was stamped up to COMMIT_OVERLAP before, so that an
        import committing while it runs is read by the next search. With nothing new this is three short
        statements, whatever the campaign holds.
        """
        campaign_id = _check_campaign_id(campaign_id)

        def work(tx: Transaction) -> tuple[int, int]:
            state = tx.rows(_SEARCH_STATE, campaign_id=campaign_id)
            if not state:
                raise _no_campaign(campaign_id)
            [(targeting_text, searched_targeting, searched_through, businesses)] = state
            everything = searched_through is None or searched_targeting != targeting_text or businesses is None
            since = _EVER if everything else searched_through
            landed = tx.rows(_LANDED_PAIRS, campaign_id=campaign_id, since=since, requested=REQUESTED)
            added = self._add_found(tx, campaign_id, targeting_from_json(targeting_text), landed, now) if landed else 0
            # Counted in full only when the search was: a big campaign's count is most of a search with nothing new.
            total = tx.rows(_COUNT_BUSINESSES, campaign_id=campaign_id)[0][0] if everything else businesses + added
            tx.run(
                _RECORD_SEARCH,
                campaign_id=campaign_id,
                now=now,
                through=now - COMMIT_OVERLAP,
                targeting=targeting_text,
                businesses=total,
            )
            return added, total

        return self._transact(work)

    @staticmethod
    def _add_found(tx: Transaction, campaign_id: int, targeting: Targeting, pairs: list[tuple], now: datetime) -> int:
        points = [loc for loc in targeting.locations if isinstance(loc, PointLocation)]
        point_params = {
            f"{name}_{i}": value
            for i, point in enumerate(points)
            for name, value in (("lat", point.lat), ("lng", point.lng), ("radius", float(point.radius_km)))
        }
        tx.run(
            _find_businesses(len(points)),
            **point_params,
            areas=[area for area, _, _ in pairs],
            categories=[category for _, category, _ in pairs],
            ranks=[rank for _, _, rank in pairs],
            countries=[loc.country_code for loc in targeting.locations if isinstance(loc, CountryLocation)],
            campaign_id=campaign_id,
        )
        tx.run(_ADD_FOUND_BUSINESSES, campaign_id=campaign_id, now=now)
        # What was not there before the insert; a search of the same campaign committing meanwhile (PostgreSQL)
        # could have added some of them too, and both would count them.
        return tx.rows(_COUNT_FOUND)[0][0]

    def search_progress(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> list[SearchProgress]:
        """Every active campaign's (or exactly these campaigns') areas by import state at ``now``, when real data
        last landed, and its search's times: one statement, whatever the number of campaigns."""
        rows = self._transact(lambda tx: tx.rows(_SEARCH_PROGRESS, **_rule(now), **_campaign_filter(campaign_ids)))
        return [SearchProgress(*row) for row in rows]

    def count_progress(self, now: datetime, since: datetime | None) -> tuple[list[SearchProgress], int]:
        """Every active campaign's progress as ``search_progress`` gives it, kept in campaign_progress and
        recounted only for the campaigns whose pairs changed after ``since`` (all of them if ``since`` is None
        or a change was noted since). Returns the progress and how many campaigns were recounted."""

        def work(tx: Transaction) -> tuple[list[SearchProgress], int]:
            everyone = since is None or tx.rows(_NEEDS_CHANGED_SINCE, since=since)[0][0] > 0
            if everyone:
                campaigns = _campaign_filter(None)
                tx.run(_FORGET_INACTIVE_PROGRESS)
            else:
                changed = [row[0] for row in tx.rows(_CHANGED_CAMPAIGNS, **_rule_since(since, now))]
                campaigns = _campaign_filter(changed)
            if everyone or campaigns["campaign_ids"]:
                tx.run(_KEEP_PROGRESS, **_rule(now), **campaigns)
            progress = [SearchProgress(*row) for row in tx.rows(_KEPT_PROGRESS)]
            return progress, len(progress) if everyone else len(campaigns["campaign_ids"])

        return self._transact(work)

    def request_searches(self, campaign_ids: Iterable[int], new_windows: Iterable[int], now: datetime) -> None:
        """Note that these campaigns' searches were asked for at ``now``; those in ``new_windows`` begin a new
        day's window of searches then."""
        ids = sorted({_check_campaign_id(i) for i in campaign_ids})
        if ids:
            windows = sorted({_check_campaign_id(i) for i in new_windows})
            self._transact(lambda tx: tx.run(_REQUEST_SEARCHES, campaign_ids=ids, new_windows=windows, now=now))

    def remember_maps(self, map_keys: Mapping[int, str]) -> set[int]:
        """Keep what each searched campaign's map shows now; returns the campaigns for which that changed (their
        map is worth drawing again)."""
        ids = sorted(_check_campaign_id(i) for i in map_keys)
        if not ids:
            return set()
        keys = [map_keys[i] for i in ids]
        return {row[0] for row in self._transact(lambda tx: tx.rows(_REMEMBER_MAPS, campaign_ids=ids, map_keys=keys))}

    def campaign_points(self, campaign_id: int, limit: int) -> list[tuple[float, float]]:
        """(lat, lng) of the campaign's ``limit`` nearest businesses, nearest first."""
        return self._transact(
            lambda tx: tx.rows(_CAMPAIGN_POINTS, campaign_id=_check_campaign_id(campaign_id), limit=limit)
        )

    # ----------------------------------------------------------------------------------------------- Searches

    def campaign_results(self, campaign_id: int) -> list[dict[str, Any]]:
        """The campaign's businesses, nearest first (country-only matches last), websites and phones as lists."""

        def work(tx: Transaction) -> list[tuple]:
            self._campaign_in(tx, campaign_id)
            return tx.rows(_CAMPAIGN_RESULTS, campaign_id=campaign_id)

        return [_result(row) for row in self._transact(work)]

    # Place names

    def place_name(self, query: str) -> PlaceName | None:
        """What a place name was resolved to when it was first looked up, or None if it never was."""
        rows = self._transact(
            lambda tx: tx.rows(f"SELECT {_PLACE_NAME_COLUMNS} FROM place_names WHERE query = $query", query=query)
        )
        return PlaceName(*rows[0]) if rows else None

    def remember_place_name(self, place: PlaceName) -> PlaceName:
        """Keep what a name was resolved to; if another caller kept the same name first, theirs stands."""

        def work(tx: Transaction) -> tuple:
            tx.run(
                f"INSERT INTO place_names ({_PLACE_NAME_COLUMNS}) "
                "VALUES ($query, $display_name, $lat, $lng, $looked_up_at) ON CONFLICT (query) DO NOTHING",
                **asdict(place),
            )
            return tx.rows(f"SELECT {_PLACE_NAME_COLUMNS} FROM place_names WHERE query = $query", query=place.query)[0]

        return PlaceName(*self._transact(work))
