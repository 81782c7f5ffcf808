"""A campaign's search: the businesses of the pairs loaded since its last search, added in one statement; which
campaigns' searches may be due; and what a search found."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nakodo_dagster.placement import (
    IMPORT_WAIT_HOURS,
    REQUESTED,
    SEARCH_AGAIN_MINUTES,
    SEARCH_IN_FLIGHT,
    SEARCH_WINDOW_HOURS,
    CountryLocation,
    PointLocation,
    Targeting,
)
from nakodo_dagster.store import changes, coverage, progress, shared
from nakodo_dagster.store.models import ProgressCount, SearchProgress, not_found, targeting_from_json
from nakodo_dagster.store.needs import ranked_categories
from nakodo_dagster.store.shared import EARTH_RADIUS_KM, EVER

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

RADIANS_PER_DEGREE = math.pi / 180

HALF_RADIANS_PER_DEGREE = math.pi / 360

# removed_in: the Overture release the business left the listing in, or None while it is listed. closed_in: the
# release that marked it permanently closed, or None while it operates. Columns only ever join at the end: a
# spreadsheet reading the CSV by position keeps working.
RESULT_COLUMNS = (
    "id",
    "name",
    "category",
    "lat",
    "lng",
    "distance_km",
    "address",
    "websites",
    "phones",
    "country",
    "removed_in",
    "closed_in",
)

SEARCH_STATE = """
SELECT c.targeting, s.searched_targeting, s.searched_through, s.businesses
FROM campaigns AS c LEFT JOIN campaign_searches AS s ON s.campaign_id = c.id
WHERE c.id = $campaign_id
"""

# The campaign's pairs loaded since $since, through the index on imported_at: with nothing new this is one short
# range scan, whatever is loaded.
LANDED_PAIRS = """
SELECT pi.area, pi.category, pi.imported_at
FROM place_imports AS pi
JOIN campaign_areas AS ca ON ca.area = pi.area AND ca.campaign_id = $campaign_id
JOIN campaign_categories AS cc ON cc.category = pi.category AND cc.campaign_id = $campaign_id
WHERE pi.imported_at > $since AND pi.release <> $requested
"""


def haversine_term(point: int) -> str:
    """The haversine of the central angle between a place ``p`` and the campaign's point number ``point``:
    ``sin^2(d / 2R)`` for a distance d, so that d <= radius is this <= ``$reach_N`` (``point_parameters``) without
    a square root or an arcsine per place. Degrees times constants rather than radians(), and the point's cosine
    passed in: PostgreSQL evaluates every function per row, and this runs once per loaded place."""
    return f"""(power(sin(($lat_{point} - p.lat) * {HALF_RADIANS_PER_DEGREE!r}), 2)
        + cos(p.lat * {RADIANS_PER_DEGREE!r}) * $cos_lat_{point}
          * power(sin(($lng_{point} - p.lng) * {HALF_RADIANS_PER_DEGREE!r}), 2))"""


def point_parameters(point: int, lat: float, lng: float, radius_km: float) -> dict[str, float]:
    """The parameters ``haversine_term(point)`` and ``add_found_businesses`` name for one point location."""
    return {
        f"lat_{point}": lat,
        f"lng_{point}": lng,
        f"cos_lat_{point}": math.cos(math.radians(lat)),
        f"reach_{point}": math.sin(radius_km / (2 * EARTH_RADIUS_KM)) ** 2,
    }


@dataclass(frozen=True)
class FirstPerPlace:
    """How a backend keeps one row per place in ``add_found_businesses``: what begins the SELECT and what follows
    its WHERE, the first row by ``{order}``; and the place id as the campaign's businesses are looked up by."""

    select: str
    after_where: str
    place_id: str


# DuckDB's window is 0.4 s cheaper than its DISTINCT ON for a first search of 644,095 businesses.
FIRST_BY_WINDOW = FirstPerPlace("SELECT", "QUALIFY row_number() OVER (PARTITION BY p.id ORDER BY {order}) = 1", "p.id")

# PostgreSQL has no QUALIFY, and its window cost 0.4 s more than DISTINCT ON's sort. Under "C", ids sort by
# their bytes with abbreviated keys instead of by strcoll (equal ids are equal bytes in either collation, so the
# choice is the same) and match campaign_businesses' key (schema.POSTGRES_MIGRATIONS, 10).
FIRST_BY_DISTINCT_ON = FirstPerPlace(
    'SELECT DISTINCT ON (p.id COLLATE "C")', 'ORDER BY p.id COLLATE "C", {order}', 'p.id COLLATE "C"'
)


# The places whose businesses go to campaign_businesses' partition number $part of $parts (schema's migration 12),
# by PostgreSQL's own hash of the partition key: the PostgreSQL store spreads a campaign's first search over
# connections, a share each, and each share writes only its own partition. A place's rows are all in one share.
POSTGRES_SHARE_OF_PLACES = "satisfies_hash_partition('campaign_businesses'::regclass, $parts, $part, p.id)"


def add_found_businesses(
    points: int, countries: bool, holds: bool, first: FirstPerPlace, share: str | None = None
) -> str:
    """Add the landed pairs' places the campaign wants and has not got to campaign_businesses, in one statement.

    One pass over the places: a place is found if a point location's radius holds it (one haversine term per
    point, where a join with the points and a grouping back cost three times as much at a million places) or,
    with ``countries``, if its country's import read it (area country:CC) with that address country. Its distance
    is to the nearest point whose radius holds it. A place of several wanted categories, or found in a cell and
    in its country, is kept once (``first``): under the campaign's first category, then the nearest, then the
    first area.

    Straight into the table, without a temp table in between (a big campaign's first search copies 600,000 rows:
    twice cost a second or more) and without ON CONFLICT, whose check per row doubled PostgreSQL's insert:
    searches of one campaign take turns (``Store._SEARCH_SETUP``), so what another added is committed and
    skipped by the anti-join. Without ``holds`` (the campaign has no business yet) the anti-join is left out: a
    first search would look up every place in vain. With ``share``, only the places that condition on ``p`` keeps.
    """
    terms = [haversine_term(point) for point in range(points)]
    # With one point and no country, every place found is within the radius: its term is not evaluated again.
    within = (
        terms
        if points == 1 and not countries
        else [f"CASE WHEN {term} <= $reach_{point} THEN {term} END" for point, term in enumerate(terms)]
    )
    found = [f"{term} <= $reach_{point}" for point, term in enumerate(terms)]
    if countries:
        found.append("(p.area = 'country:' || p.country AND p.country IN (SELECT unnest($countries::TEXT[])))")
    # Within the reach, the term is at most 1: the arcsine needs no clamp.
    distance = (
        f"2 * {EARTH_RADIUS_KM} * asin(sqrt({within[0] if points == 1 else 'least(' + ', '.join(within) + ')'}))"
        if points
        else "CAST(NULL AS FLOAT8)"
    )
    held = f"""
  AND NOT EXISTS (
    SELECT 1 FROM campaign_businesses AS b WHERE b.campaign_id = $campaign_id AND b.place_id = {first.place_id}
  )"""
    order = "array_position($categories_by_rank::TEXT[], p.category), distance_km NULLS LAST, p.area"
    return f"""
INSERT INTO campaign_businesses (
    campaign_id, place_id, name, category, lat, lng, distance_km, address, websites, phones, country, added_at
)
{first.select} $campaign_id, p.id, p.name, p.category, p.lat, p.lng, {distance} AS distance_km,
       p.address, p.websites, p.phones, p.country, $now
FROM places AS p
WHERE (p.area, p.category) IN (SELECT unnest($areas::TEXT[]), unnest($categories::TEXT[]))
  AND ({" OR ".join(found)}){f" AND {share}" if share else ""}{held if holds else ""}
{first.after_where.format(order=order)}
"""


COUNT_BUSINESSES = "SELECT count(*) FROM campaign_businesses WHERE campaign_id = $campaign_id"

# searched_landed is kept when the search read nothing new: what it had seen, it has still seen.
RECORD_SEARCH = """
INSERT INTO campaign_searches (
    campaign_id, searched_at, searched_through, searched_targeting, businesses, searched_landed
)
VALUES ($campaign_id, $now, $through, $targeting, $businesses, $landed)
ON CONFLICT (campaign_id) DO UPDATE
SET searched_at = excluded.searched_at, searched_through = excluded.searched_through,
    searched_targeting = excluded.searched_targeting, businesses = excluded.businesses,
    searched_landed = coalesce(excluded.searched_landed, campaign_searches.searched_landed)
"""

# Sorted ids: two callers lock overlapping rows in the same order (PostgreSQL).
REQUEST_SEARCHES = """
INSERT INTO campaign_searches (campaign_id, window_start, requested_at)
SELECT id, CASE WHEN id IN (SELECT unnest($new_windows::INTEGER[])) THEN $now END, $now
FROM (SELECT unnest($campaign_ids::INTEGER[]) AS id) AS requested
ORDER BY id
ON CONFLICT (campaign_id) DO UPDATE
SET requested_at = excluded.requested_at,
    window_start = coalesce(excluded.window_start, campaign_searches.window_start)
"""

CAMPAIGN_POINTS = """
SELECT lat, lng, removed_in IS NOT NULL, closed_in IS NOT NULL FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, place_id LIMIT $limit
"""


CAMPAIGN_RESULTS = f"""
SELECT place_id, {", ".join(RESULT_COLUMNS[1:])} FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, name NULLS LAST, place_id
"""


def add_businesses(
    tx: Transaction,
    campaign_id: int,
    now: datetime,
    *,
    setup: Iterable[str],
    first: FirstPerPlace,
    insert: Callable[[Transaction, Callable[..., str], dict[str, Any], bool], int],
) -> tuple[int, int]:
    """Search the campaign (``Store.add_campaign_businesses``): the backend's ``setup`` statements first, then its
    ``insert`` of ``add_found_businesses`` with its way of keeping one row per place (``first``)."""
    for statement in setup:
        tx.run(statement, campaign_id=campaign_id)
    state = tx.rows(SEARCH_STATE, campaign_id=campaign_id)
    if not state:
        raise not_found("campaign", campaign_id)
    [(targeting_text, searched_targeting, searched_through, businesses)] = state
    everything = searched_through is None or searched_targeting != targeting_text or businesses is None
    since = EVER if everything else searched_through
    landed = tx.rows(LANDED_PAIRS, campaign_id=campaign_id, since=since, requested=REQUESTED)
    # Counted in full only when the search is: a big campaign's count is most of a search with nothing new.
    # Only searches add businesses, one at a time per campaign: what it holds now plus what this one adds
    # is its total.
    held = tx.rows(COUNT_BUSINESSES, campaign_id=campaign_id)[0][0] if everything else businesses
    targeting = targeting_from_json(targeting_text)
    if landed and held:
        # Before what is new is added: a business whose id changed is held under its new id, and not added again.
        held -= changes.apply(tx, campaign_id, landed, since)
    # A search that reads everything into a campaign holding nothing is its first: the big copy.
    fills = everything and not held
    if landed:
        statement, params = _add_found(campaign_id, targeting, landed, now, held > 0, first)
        added = insert(tx, statement, params, fills)
    else:
        added = 0
    total = held + added
    tx.run(
        RECORD_SEARCH,
        campaign_id=campaign_id,
        now=now,
        through=now - shared.COMMIT_OVERLAP,
        targeting=targeting_text,
        businesses=total,
        landed=max((imported_at for *_, imported_at in landed), default=None),
    )
    return added, total


def _add_found(
    campaign_id: int, targeting: Targeting, pairs: list[tuple], now: datetime, holds: bool, first: FirstPerPlace
) -> tuple[Callable[..., str], dict[str, Any]]:
    """The search's insert of the landed ``pairs``, but for its ``share``, and its parameters."""
    points = [loc for loc in targeting.locations if isinstance(loc, PointLocation)]
    countries = [loc.country_code for loc in targeting.locations if isinstance(loc, CountryLocation)]
    params: dict[str, Any] = {
        "areas": [area for area, _, _ in pairs],
        "categories": [category for _, category, _ in pairs],
        "categories_by_rank": ranked_categories(targeting),
        "countries": countries,
        "campaign_id": campaign_id,
        "now": now,
    }
    for number, point in enumerate(points):
        params |= point_parameters(number, point.lat, point.lng, float(point.radius_km))
    return functools.partial(add_found_businesses, len(points), bool(countries), holds, first), params


def count_progress(tx: Transaction, now: datetime) -> ProgressCount:
    """Bring the kept progress up to date at ``now`` and read the campaigns whose search may be due
    (``Store.count_progress``)."""
    recount = coverage.recount(tx, now)
    [(active,)] = tx.rows(progress.KEPT_PROGRESS_SIZE)
    rows = tx.rows(
        progress.MAYBE_DUE_PROGRESS,
        in_flight_after=now - SEARCH_IN_FLIGHT,
        new_day_before=now - timedelta(hours=SEARCH_WINDOW_HOURS),
        waiting_after=now - timedelta(hours=IMPORT_WAIT_HOURS),
        again_before=now - timedelta(minutes=SEARCH_AGAIN_MINUTES),
    )
    return ProgressCount([SearchProgress(*row) for row in rows], active, recount.campaign_areas)


def result(row: tuple) -> dict[str, Any]:
    """A CAMPAIGN_RESULTS row as a business: websites and phones as lists."""
    found = dict(zip(RESULT_COLUMNS, row, strict=True))
    for name in ("websites", "phones"):
        if found[name] is not None:
            found[name] = json.loads(found[name])
    return found
