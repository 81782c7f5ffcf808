"""What the store's concerns share: the one freshness rule (``pair_state``) and its parameters, the SQL fragments
several statements are built from, and the commit overlap every reader of stamped rows allows for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from nakodo_dagster.placement import REQUESTED, Cutoffs
from nakodo_dagster.store.models import check_id

# Mean Earth radius (IUGG): haversine on this sphere is within about 0.5 % of the WGS84 geodesic. Searches measure
# distances on it, and an import's changes tell a reissued place by it.
EARTH_RADIUS_KM = 6371.0088

# A loaded pair's imported_at (and a noted change) is stamped just before its commit, and a PostgreSQL statement
# does not see a commit that lands after the statement began: a pair stamped shortly before a search or a sensor
# tick began may be invisible to it. So each vouches only for what was stamped this long before it began, and the
# next one reads that stretch again (harmless: each business is added once, a pair recounted twice counts once).
# The margin also absorbs clock drift between the writer's machine and the reader's.
COMMIT_OVERLAP = timedelta(minutes=1)
# What a campaign's first search, or its first after its targeting changed, reads: everything loaded. A coverage
# count that never counted starts there too.
EVER = datetime(1970, 1, 1, tzinfo=UTC)


# A list of (area, category) pairs as two arrays zipped in one SELECT: one parameter, whatever the count.
PAIRS = "(SELECT unnest($areas::TEXT[]) AS area, unnest($categories::TEXT[]) AS category)"

# A place's columns, as places (and the drift gate's held_places) keep them, and the incoming rows (alias i) as
# places of $release.
PLACE_COLUMNS = "area, category, id, name, lat, lng, confidence, address, country, websites, phones, release, sources"

INCOMING_AS_PLACES = (
    "i.area, i.category, i.id, i.name, i.lat, i.lng, i.confidence, i.address, i.country, i.websites, i.phones, "
    "$release, i.sources"
)

IMPORT_COLUMNS = "area, category, release, rows, imported_at, failure, roll_out"


def chosen(column: str) -> str:
    """Every campaign ($everyone), or the campaigns named ($campaign_ids), by the id ``column`` (a column of the
    store, never user text); ``campaign_filter`` gives the parameters."""
    return f"($everyone OR {column} IN (SELECT unnest($campaign_ids::INTEGER[])))"


def campaign_filter(campaign_ids: Sequence[int] | None) -> dict[str, Any]:
    """The parameters of ``chosen``: every campaign (None) or exactly these."""
    if campaign_ids is None:
        return {"everyone": True, "campaign_ids": []}
    return {"everyone": False, "campaign_ids": [check_id("campaign", i) for i in campaign_ids]}


# The campaigns' kept areas times their categories: every active campaign ($everyone), or the active ones of the
# campaigns named (a sync of one campaign). Never a paused one, named or not: only active campaigns are held to
# their account's plan, so imports obey the plans by asking for nothing else.
CAMPAIGN_PAIRS = f"""
FROM campaigns AS c
JOIN campaign_areas AS ca ON ca.campaign_id = c.id
JOIN campaign_categories AS cc ON cc.campaign_id = c.id
LEFT JOIN place_imports ON place_imports.area = ca.area AND place_imports.category = cc.category
WHERE c.status = 'active' AND {chosen("c.id")}
"""


def on_its_way(row: str) -> str:
    """A mark of ``row`` (a table name of the store, never user text) on its way: asked for, no failure recorded,
    and asked for after $coming_after (placement.Cutoffs). Past that an import is taken as lost, and its pair
    reads as failed."""
    return f"{row}.release = $requested AND {row}.failure IS NULL AND {row}.imported_at > $coming_after"


def pair_state(row: str) -> str:
    """placement.Cutoffs in SQL, for the place_imports columns of ``row`` (a table name of the store, never
    user text): the one rule for fresh, on its way, failed and missing; no row at all is missing. A mark whose
    failure was recorded is never on its way; a loaded pair asked to move to another release (placement.rolled_out)
    is missing whatever its age."""
    return f"""CASE
        WHEN {row}.release IS NULL THEN 'missing'
        WHEN {row}.release <> $requested THEN CASE
            WHEN {row}.imported_at > $fresh_after AND ({row}.roll_out IS NULL OR {row}.roll_out = {row}.release)
            THEN 'fresh' ELSE 'missing' END
        WHEN {on_its_way(row)} THEN 'coming'
        WHEN {row}.imported_at > $retry_after THEN 'failed'
        ELSE 'missing'
    END"""


# A pair missing by the one rule: what is asked for, and what a mark may take over.
MISSING = f"{pair_state('place_imports')} = 'missing'"


def rule(now: datetime) -> dict[str, Any]:
    """The parameters of ``pair_state``: the freshness boundaries at ``now``, from placement.Cutoffs."""
    return {"requested": REQUESTED, **asdict(Cutoffs.at(now))}


def rule_since(since: datetime, now: datetime) -> dict[str, Any]:
    """``rule(now)`` and the same boundaries at ``since`` (``*_then``): what crossed one in between."""
    then = {f"{name}_then": value for name, value in asdict(Cutoffs.at(since)).items()}
    return {**rule(now), **then, "since": since}
