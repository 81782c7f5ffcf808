"""What the campaigns need, kept beside them: their areas and categories, each pair's count of campaigns
(needed_pairs), and the note that tells the sensors the needs changed. ``needs`` reads what is missing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nakodo_dagster.placement import Needs, Targeting, areas_for, block_key, first_area
from nakodo_dagster.store.models import PAIR_STATES
from nakodo_dagster.store.shared import CAMPAIGN_PAIRS, MISSING, on_its_way, rule, rule_since
from nakodo_dagster.store.transaction import by_area

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# What a campaign needs, kept when it is created or changed (placement.areas_for): the sensors join on it.
KEEP_CAMPAIGN_AREAS = """
INSERT INTO campaign_areas (campaign_id, area, block)
SELECT $campaign_id, unnest($areas::TEXT[]), unnest($blocks::TEXT[])
ON CONFLICT (campaign_id, area) DO NOTHING
RETURNING area
"""

KEEP_FIRST_AREA = "UPDATE campaigns SET first_area = $first_area WHERE id = $campaign_id"

# New campaigns' areas and categories, one row per (campaign, area) and per (campaign, category), zipped arrays.
ADD_CAMPAIGN_AREAS = """
INSERT INTO campaign_areas (campaign_id, area, block)
SELECT unnest($campaign_ids::INTEGER[]), unnest($areas::TEXT[]), unnest($blocks::TEXT[])
"""

ADD_CAMPAIGN_CATEGORIES = """
INSERT INTO campaign_categories (campaign_id, category, rank)
SELECT unnest($campaign_ids::INTEGER[]), unnest($categories::TEXT[]), unnest($ranks::INTEGER[])
"""


# Kept monotonic: a change noted by a slow transaction never hides a later one.
NOTE_NEEDS_CHANGED = """
INSERT INTO needs_changes (id, changed_at) VALUES (1, $changed_at)
ON CONFLICT (id) DO UPDATE SET changed_at = greatest(needs_changes.changed_at, excluded.changed_at)
"""

NEEDS_CHANGED_SINCE = "SELECT count(*) FROM needs_changes WHERE changed_at > $since"


# A real release or a failed mark that aged into missing since $since: the other ways a pair becomes missing
# (a new campaign, a mark taken back) are noted in needs_changes.
AGED_INTO_MISSING = """
SELECT count(*) FROM (
    SELECT 1 FROM place_imports
    WHERE (release <> $requested AND imported_at > $fresh_after_then AND imported_at <= $fresh_after)
       OR (release = $requested AND imported_at > $retry_after_then AND imported_at <= $retry_after)
    LIMIT 1
) AS aged
"""

# Campaigns start ($change 1) or stop (-1) needing their pairs: all of them, or only those of the areas named
# ($every_area false: a location just added). One row per pair with how many of the campaigns need it, kept aside
# with its size known, so that the upsert and the count after it read it once each.
CREATE_NEEDS_CHANGING = """
CREATE TEMP TABLE needs_changing AS
SELECT ca.area, cc.category, min(ca.block) AS block, count(*) AS campaigns
FROM campaign_areas AS ca JOIN campaign_categories AS cc ON cc.campaign_id = ca.campaign_id
WHERE ca.campaign_id IN (SELECT unnest($campaign_ids::INTEGER[]))
  AND ($every_area OR ca.area IN (SELECT unnest($areas::TEXT[])))
GROUP BY ca.area, cc.category
"""

# Sorted, so that two writers lock shared pairs in one order.
CHANGE_NEEDED_PAIRS = """
INSERT INTO needed_pairs (area, category, block, campaigns, changed_at)
SELECT area, category, block, campaigns * $change, $changed_at FROM needs_changing
ORDER BY area, category
ON CONFLICT (area, category) DO UPDATE
SET campaigns = needed_pairs.campaigns + excluded.campaigns, changed_at = excluded.changed_at
"""

# Read after the change, whose row locks hold to the commit: a pair now needed by exactly the campaigns that started
# needing it was needed by none before; one at 0 after a stop is needed by none now.
NEEDED_PAIRS_TURNED = """
SELECT count(*) FROM needs_changing AS n JOIN needed_pairs AS p ON p.area = n.area AND p.category = n.category
WHERE p.campaigns = CASE WHEN $change > 0 THEN n.campaigns ELSE 0 END
"""

DROP_NEEDS_CHANGING = "DROP TABLE needs_changing"

CHANGE_NEEDED_TOTAL = "UPDATE coverage_counts SET pairs = pairs + $change WHERE state = 'needed'"


# What every active campaign needs, counted per pair, and how many pairs that is: the store's own migration.
# Stamped 1970: the first coverage count looks at every place_imports row instead.
COUNT_NEEDED_PAIRS = """
INSERT INTO needed_pairs (area, category, block, campaigns, changed_at)
SELECT ca.area, cc.category, min(ca.block), count(*), TIMESTAMPTZ '1970-01-01 00:00:00+00'
FROM campaigns AS c
JOIN campaign_areas AS ca ON ca.campaign_id = c.id
JOIN campaign_categories AS cc ON cc.campaign_id = c.id
WHERE c.status = 'active'
GROUP BY ca.area, cc.category
"""

COUNT_NEEDED_TOTAL = """
INSERT INTO coverage_counts (state, pairs)
SELECT 'needed', count(*) FROM needed_pairs WHERE campaigns > 0
UNION ALL SELECT unnest($states::TEXT[]), 0
"""


NEEDS_MISSING = f"""
SELECT DISTINCT ca.area, cc.category {CAMPAIGN_PAIRS} AND {MISSING}
ORDER BY ca.area, cc.category
"""

NEEDS_COMING = f"""
SELECT DISTINCT ca.area {CAMPAIGN_PAIRS}
AND {on_its_way("place_imports")}
"""

NEEDS_ARRIVED_AT = f"SELECT max(place_imports.imported_at) {CAMPAIGN_PAIRS} AND place_imports.release <> $requested"


def keep_campaign_areas(tx: Transaction, campaign_id: int, targeting: Targeting) -> list[str]:
    """Keep the areas the targeting needs beside the campaign (those it keeps already stay as they are); returns
    the areas new to it."""
    areas = areas_for(targeting)
    rows = tx.rows(
        KEEP_CAMPAIGN_AREAS,
        campaign_id=campaign_id,
        areas=list(areas),
        blocks=[block_key(area) for area in areas.values()],
    )
    return [area for (area,) in rows]


def keep_first_area(tx: Transaction, campaign_id: int, targeting: Targeting) -> None:
    """Keep the area of the campaign's first location (where its first businesses come from)."""
    tx.run(KEEP_FIRST_AREA, campaign_id=campaign_id, first_area=first_area(targeting).key)


def ranked_categories(targeting: Targeting) -> list[str]:
    """The campaign's categories, each once, first first: campaign_categories' rank is the position here."""
    return list(dict.fromkeys(targeting.categories))


def keep_campaign_needs(tx: Transaction, targetings: Mapping[int, Targeting]) -> None:
    """Keep new campaigns' areas (``areas_for``, worked out here) and their categories in each campaign's own order,
    by campaign id."""
    areas = {campaign_id: areas_for(targeting) for campaign_id, targeting in targetings.items()}
    tx.run(
        ADD_CAMPAIGN_AREAS,
        campaign_ids=[campaign_id for campaign_id, keyed in areas.items() for _ in keyed],
        areas=[key for keyed in areas.values() for key in keyed],
        blocks=[block_key(area) for keyed in areas.values() for area in keyed.values()],
    )
    ranked = {campaign_id: ranked_categories(targeting) for campaign_id, targeting in targetings.items()}
    tx.run(
        ADD_CAMPAIGN_CATEGORIES,
        campaign_ids=[campaign_id for campaign_id, categories in ranked.items() for _ in categories],
        categories=[category for categories in ranked.values() for category in categories],
        ranks=[rank for categories in ranked.values() for rank in range(len(categories))],
    )


def note_needs_changed(tx: Transaction) -> None:
    """Tell the sensors the needs changed (a campaign added or changed, a mark taken back or failed)."""
    # The transaction's last statement, stamped as late as possible: a sensor tick that began before this commit
    # and did not see it looks again (it reads changes from COMMIT_OVERLAP before its own start).
    tx.run(NOTE_NEEDS_CHANGED, changed_at=datetime.now(UTC))


def count_needs(tx: Transaction, campaign_ids: Sequence[int], change: int, areas: Sequence[str] | None = None) -> None:
    """The campaigns start (``change`` 1) or stop (-1) needing their pairs, or only those of ``areas``: kept in
    needed_pairs, with the fleet's count of needed pairs, for the coverage count. Called under the campaigns'
    accounts' locks, which make the change itself one at a time."""
    tx.run(CREATE_NEEDS_CHANGING, campaign_ids=list(campaign_ids), every_area=areas is None, areas=list(areas or ()))
    tx.analyze("needs_changing")
    tx.run(CHANGE_NEEDED_PAIRS, change=change, changed_at=datetime.now(UTC))
    [(turned,)] = tx.rows(NEEDED_PAIRS_TURNED, change=change)
    tx.run(DROP_NEEDS_CHANGING)
    if turned:
        tx.run(CHANGE_NEEDED_TOTAL, change=turned * change)


def count_needed_pairs(tx: Transaction) -> None:
    """Fill needed_pairs and the needed count from the campaigns kept so far: the schema's version 6 adds the
    tables empty."""
    tx.run(COUNT_NEEDED_PAIRS)
    tx.run(COUNT_NEEDED_TOTAL, states=list(PAIR_STATES))


def changed_since(tx: Transaction, since: datetime, now: datetime) -> bool:
    """Whether a pair may have become missing after ``since`` (``Store.needs_changed_since``)."""
    [(noted,)] = tx.rows(NEEDS_CHANGED_SINCE, since=since)
    if noted:
        return True
    [(aged,)] = tx.rows(AGED_INTO_MISSING, **rule_since(since, now))
    return bool(aged)


def needs(tx: Transaction, now: datetime, campaigns: dict[str, Any]) -> Needs:
    """``placement.import_needs`` of the pairs of ``campaigns`` (``shared.chosen``) merged, computed by the
    database."""
    params = {**rule(now), **campaigns}
    missing = by_area(tx.rows(NEEDS_MISSING, **params))
    coming = {area for (area,) in tx.rows(NEEDS_COMING, **params)}
    [(arrived_at,)] = tx.rows(NEEDS_ARRIVED_AT, **params)
    return Needs(missing, coming, arrived_at)
