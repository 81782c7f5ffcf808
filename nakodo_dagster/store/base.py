"""The store behind campaigns and imports, written once for DuckDB and PostgreSQL.

Every statement is written once, with ``$name`` parameters, in SQL both databases accept; a backend only
supplies a short transaction (``Store._transact``), the placeholder style and a bulk load of Arrow rows
(``Transaction``). No method holds a transaction across calls, nor across a call to another service.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    Area,
    CountryLocation,
    ImportRun,
    Location,
    PlaceImport,
    PointLocation,
    Targeting,
    areas_for,
    check_categories,
    import_needs,
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

# The compare and set: whatever comes back is ours to import, and nothing else is. The WHERE restates the
# timeouts from the other side; $force is the analyst's deliberate override. Sorted so that two PostgreSQL
# callers lock overlapping rows in the same order and never deadlock.
_MARK = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT area, category, $requested, 0, $stamp FROM {_PAIRS} AS wanted
ORDER BY area, category
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, rows = 0, imported_at = excluded.imported_at
WHERE $force
   OR (place_imports.release = $requested AND place_imports.imported_at < $retry_before)
   OR (place_imports.release <> $requested AND place_imports.imported_at < $fresh_before)
RETURNING area, category
"""

# Keyed on the exact stamp this caller wrote: never another caller's mark, even on the same pair.
_TAKE_BACK = f"""
DELETE FROM place_imports USING {_PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND place_imports.release = $requested AND place_imports.imported_at = $stamp
RETURNING place_imports.area
"""

_MARK_FAILED = f"""
UPDATE place_imports SET imported_at = $failed_at FROM {_PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND place_imports.release = $requested AND place_imports.imported_at > $failed_at
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

_COUNT_PLACES = f"""
SELECT places.area, places.category, count(*)
FROM places JOIN {_PAIRS} AS pair ON places.area = pair.area AND places.category = pair.category
GROUP BY places.area, places.category
"""

_CAMPAIGN_COLUMNS = "id, name, targeting, status, created_at"

# Haversine to the nearest point location whose radius holds the place; a country location matches a place
# its country's import read (area country:CC) with that address country. A place loaded under several
# categories is added once, under the first category in the campaign's order.
_ADD_CAMPAIGN_BUSINESSES = f"""
WITH points AS (
    SELECT unnest($point_lats::FLOAT8[]) AS lat, unnest($point_lngs::FLOAT8[]) AS lng,
           unnest($point_radii::FLOAT8[]) AS radius_km
),
wanted AS (SELECT unnest($categories::TEXT[]) AS category, unnest($ranks::INTEGER[]) AS rank),
candidates AS (
    SELECT p.area, p.category, p.id, p.name, p.lat, p.lng, p.address, p.websites, p.phones, p.country, w.rank
    FROM places AS p JOIN wanted AS w ON w.category = p.category
    WHERE p.area IN (SELECT unnest($areas::TEXT[]))
),
distances AS (
    SELECT c.area, c.category, c.id, pt.radius_km,
           2 * {EARTH_RADIUS_KM} * asin(sqrt(least(CAST(1 AS FLOAT8),
               power(sin(radians(pt.lat - c.lat) / 2), 2)
               + cos(radians(c.lat)) * cos(radians(pt.lat)) * power(sin(radians(pt.lng - c.lng) / 2), 2)
           ))) AS km
    FROM candidates AS c CROSS JOIN points AS pt
),
nearest AS (
    SELECT area, category, id, min(km) AS distance_km FROM distances WHERE km <= radius_km
    GROUP BY area, category, id
),
matched AS (
    SELECT c.*, n.distance_km,
           row_number() OVER (PARTITION BY c.id ORDER BY c.rank, n.distance_km NULLS LAST, c.area) AS choice
    FROM candidates AS c
    LEFT JOIN nearest AS n ON n.area = c.area AND n.category = c.category AND n.id = c.id
    WHERE n.distance_km IS NOT NULL
       OR (c.area = 'country:' || c.country AND c.country IN (SELECT unnest($countries::TEXT[])))
)
INSERT INTO campaign_businesses (
    campaign_id, place_id, name, category, lat, lng, distance_km, address, websites, phones, country, added_at
)
SELECT $campaign_id, id, name, category, lat, lng, distance_km, address, websites, phones, country, $now
FROM matched WHERE choice = 1
ORDER BY distance_km NULLS LAST, name NULLS LAST, id
ON CONFLICT (campaign_id, place_id) DO NOTHING
RETURNING place_id
"""

_CAMPAIGN_RESULTS = f"""
SELECT place_id, {", ".join(RESULT_COLUMNS[1:])} FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, name NULLS LAST, place_id
"""

# The same four answers import_needs gives, counted per category.
_IMPORT_STATUS = """
SELECT category,
       count(*) FILTER (WHERE release <> $requested AND imported_at > $fresh_after),
       count(*) FILTER (WHERE release = $requested AND imported_at > $coming_after),
       count(*) FILTER (WHERE release = $requested AND imported_at <= $coming_after),
       count(*) FILTER (WHERE release <> $requested AND imported_at <= $fresh_after),
       min(imported_at) FILTER (WHERE release <> $requested)
FROM place_imports GROUP BY category ORDER BY category
"""

# Only a failed mark goes (asked for at least IMPORT_HOURS ago): a mark on its way, a real release, or a mark
# another caller wrote a moment ago fails the WHERE and stays.
_FORGET_FAILED_IMPORT = """
DELETE FROM place_imports
WHERE area = $area AND category = $category AND release = $requested AND imported_at <= $failed_before
RETURNING area, category, release, rows, imported_at
"""

_PLACE_NAME_COLUMNS = "query, display_name, lat, lng, looked_up_at"


class Transaction(ABC):
    """One open transaction: the only way the store's SQL reaches a database."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def _translate(self, sql: str) -> str:
        """The statement in the driver's placeholder style; ``$name`` is DuckDB's own."""
        return sql

    def run(self, sql: str, **params: Any) -> None:
        """Execute one statement."""
        self._cursor.execute(self._translate(sql), params)

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
    """Import runs this caller reserved, and the stamp its marks carry (the key to taking them back)."""

    stamp: datetime
    runs: list[ImportRun]

    @property
    def areas(self) -> set[str]:
        """The areas an import was just asked for."""
        return {area for run in self.runs for area in run.areas}


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
        return self._transact(
            lambda tx: tx.rows(
                _MARK,
                **params,
                requested=REQUESTED,
                stamp=stamp,
                force=force,
                retry_before=now - timedelta(days=RETRY_DAYS),
                fresh_before=now - timedelta(days=FRESH_DAYS),
            )
        )

    def take_back(self, pairs: Iterable[tuple[str, str]], stamp: datetime) -> int:
        """Delete this caller's unused marks (its exact stamp) so the next look asks again; returns how many."""
        params = _pair_params(pairs)
        if not params["areas"]:
            return 0
        return len(self._transact(lambda tx: tx.rows(_TAKE_BACK, **params, requested=REQUESTED, stamp=stamp)))

    def mark_failed(self, pairs: Iterable[tuple[str, str]], now: datetime) -> int:
        """Date a failed import's marks back so campaigns stop waiting now; the 7-day block runs from there."""
        params = _pair_params(pairs)
        if not params["areas"]:
            return 0
        # A mark older than IMPORT_HOURS already reads as failed: moving it would only shorten its block.
        failed_at = now - timedelta(hours=IMPORT_HOURS)
        return len(self._transact(lambda tx: tx.rows(_MARK_FAILED, **params, requested=REQUESTED, failed_at=failed_at)))

    # Asking for imports

    def reserve_runs(
        self, missing: Mapping[str, Iterable[str]], areas: Mapping[str, Area], now: datetime
    ) -> Reservation:
        """Reserve the missing pairs and group only those we got into import runs."""
        reserved = self.reserve(missing, now, now)
        return Reservation(now, import_runs(reserved, areas))

    def launch_runs(self, reservation: Reservation, launch: Callable[[ImportRun], None]) -> None:
        """Hand each reserved run to ``launch`` in order; if one fails, take back the unsent runs' marks and raise."""
        for index, run in enumerate(reservation.runs):
            try:
                launch(run)
            # Anything short of a handed-over run, an interrupt included, means the import was not asked for.
            except BaseException:
                unsent = [pair for later in reservation.runs[index:] for pair in later.pairs]
                self.take_back(unsent, reservation.stamp)
                raise

    def request_imports(
        self,
        targeting: Targeting,
        categories: Iterable[str],
        launch: Callable[[ImportRun], None] | None,
        *,
        now: datetime,
        off_reason: str | None = None,
    ) -> int:
        """Ask for the imports a campaign is missing; returns how many of its areas are still to come."""
        areas = areas_for(targeting)
        categories = check_categories(categories)
        needs = import_needs(areas, categories, self.import_rows(areas, categories), now)
        if launch is None:
            # Imports are off: the search works on what is loaded, and no mark waits on an import nobody will run.
            if needs.missing:
                logger.warning(
                    "%d areas of business listings not loaded: %s",
                    len(needs.missing),
                    off_reason or "imports are off",
                )
            return len(needs.coming)
        reservation = self.reserve_runs(needs.missing, areas, now)
        self.launch_runs(reservation, launch)
        return len(needs.coming | reservation.areas)

    # Imports

    def write_import(self, run: ImportRun, release: str, places: pa.Table, now: datetime) -> dict[tuple[str, str], int]:
        """Replace the places of the run's pairs and record the release, all at once; returns rows per pair."""
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
            recorded = tx.rows(_RECORD_IMPORTS, **params, release=release, now=now)
            tx.run(_DELETE_PLACES, **params)
            tx.run(_INSERT_PLACES, **params, release=release)
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
        rows = self._transact(
            lambda tx: tx.rows(
                _FORGET_FAILED_IMPORT,
                area=area,
                category=category,
                requested=REQUESTED,
                failed_before=now - timedelta(hours=IMPORT_HOURS),
            )
        )
        return PlaceImport(*rows[0]) if rows else None

    def import_status(self, now: datetime) -> list[ImportStatus]:
        """Per category, how many pairs are fresh, on their way, failed or stale, and the oldest release."""
        rows = self._transact(
            lambda tx: tx.rows(
                _IMPORT_STATUS,
                requested=REQUESTED,
                fresh_after=now - timedelta(days=FRESH_DAYS),
                coming_after=now - timedelta(hours=IMPORT_HOURS),
            )
        )
        return [ImportStatus(*row) for row in rows]

    # Campaigns

    def add_campaign(self, name: str, targeting: Targeting, *, now: datetime | None = None) -> int:
        """Create an active campaign; returns its id."""
        name = check_campaign_name(name)
        if not isinstance(targeting, Targeting):
            raise InvalidInput(f"targeting {targeting!r} is not a Targeting of locations and categories")
        params = {"name": name, "targeting": targeting_to_json(targeting), "now": now or datetime.now(UTC)}
        return self._transact(
            lambda tx: tx.rows(
                "INSERT INTO campaigns (name, targeting, created_at) VALUES ($name, $targeting, $now) RETURNING id",
                **params,
            )
        )[0][0]

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
            return replace(campaign, targeting=targeting)

        return self._transact(work)

    def add_campaign_businesses(self, campaign_id: int, now: datetime) -> tuple[int, int]:
        """Add the loaded businesses the campaign has not got yet, nearest first; returns (added, total)."""

        def work(tx: Transaction) -> tuple[int, int]:
            targeting = self._campaign_in(tx, campaign_id).targeting
            points = [loc for loc in targeting.locations if isinstance(loc, PointLocation)]
            categories = list(dict.fromkeys(targeting.categories))
            added = tx.rows(
                _ADD_CAMPAIGN_BUSINESSES,
                point_lats=[p.lat for p in points],
                point_lngs=[p.lng for p in points],
                point_radii=[p.radius_km for p in points],
                countries=[loc.country_code for loc in targeting.locations if isinstance(loc, CountryLocation)],
                categories=categories,
                ranks=list(range(len(categories))),
                areas=list(areas_for(targeting)),
                campaign_id=campaign_id,
                now=now,
            )
            [(total,)] = tx.rows(
                "SELECT count(*) FROM campaign_businesses WHERE campaign_id = $campaign_id", campaign_id=campaign_id
            )
            return len(added), total

        return self._transact(work)

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
