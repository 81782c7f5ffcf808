"""One business once across releases: what a pair's import changed about its places' ids, recorded as the import
lands, and applied to each campaign's businesses by the campaign's next search.

A campaign keeps its businesses by place id, and Overture reissues ids (a source replacing its feature, ids that
became UUIDs): without this the next search would add the same business again under its new id, and a campaign
would write to it twice. A place gone from the newest release (closed, merged) would stay listed as if it were open.
Each import that replaces a pair's places records in place_changes, per pair:

- a place kept under a new id: ``old_id`` and ``new_id``, the gone place and the arrived one with the same name
  within ``SAME_PLACE_METRES`` (an earlier change that led to ``old_id`` leads to ``new_id`` from then on);
- a place removed: ``old_id`` alone, gone from the pair and from every other pair that holds places;
- a removed place back: ``new_id`` alone.

A campaign's search applies the changes of its pairs that landed since its previous search before it adds what is
new: its businesses move to their new ids (a business it holds under both ids is kept once), and each business's
``removed_in`` says the release it was removed in, or nothing once it is back.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING

from nakodo_dagster.store.shared import EARTH_RADIUS_KM, PAIRS

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# Overture's reissued ids keep the place where it was; a few tens of metres allow for a source that moved its point
# a little, while two shops of one chain on one street stay apart.
SAME_PLACE_METRES = 50.0
# Metres per degree of latitude on the sphere the searches measure on.
_METRES_PER_DEGREE = math.radians(EARTH_RADIUS_KM * 1000)


def _same_name(alias: str) -> str:
    """A place's name compared case-folded and without spaces or punctuation: "Café de Flore" is "cafédeflore"."""
    return f"lower(regexp_replace({alias}.name, '[[:space:][:punct:]]+', '', 'g'))"


# The landing pairs' places that this import replaces and does not bring back, and the rows it brings that were not
# there: by id within the pair. Kept aside once per import (each is read three times), with the planner told their
# sizes: PostgreSQL, guessing one row from the pairs' unnest, looped over the incoming rows once per place (7 s for
# one busy cell's import).
KEEP_GONE = f"""
CREATE TEMP TABLE gone_places AS
SELECT p.area, p.category, p.id, p.lat, p.lng, {_same_name("p")} AS name
FROM places AS p JOIN {PAIRS} AS pair ON p.area = pair.area AND p.category = pair.category
WHERE NOT EXISTS (
    SELECT 1 FROM incoming_places AS i WHERE i.area = p.area AND i.category = p.category AND i.id = p.id
)
"""

KEEP_ARRIVED = f"""
CREATE TEMP TABLE arrived_places AS
SELECT i.area, i.category, i.id, i.lat, i.lng, {_same_name("i")} AS name
FROM incoming_places AS i JOIN {PAIRS} AS pair ON i.area = pair.area AND i.category = pair.category
WHERE NOT EXISTS (SELECT 1 FROM places AS p WHERE p.area = i.area AND p.category = i.category AND p.id = i.id)
"""

# A gone place and an arrived one of the same pair and name within SAME_PLACE_METRES, each the other's nearest: two
# reissued places of one name side by side pair up one to one.
RECORD_REISSUED = f"""
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id)
SELECT area, category, $release, $now, old_id, new_id FROM (
    SELECT area, category, old_id, new_id,
           row_number() OVER (PARTITION BY area, category, old_id ORDER BY metres, new_id) AS nearest_arrived,
           row_number() OVER (PARTITION BY area, category, new_id ORDER BY metres, old_id) AS nearest_gone
    FROM (
        SELECT gone.area, gone.category, gone.id AS old_id, arrived.id AS new_id,
               {_METRES_PER_DEGREE!r} * sqrt(
                   power(arrived.lat - gone.lat, 2)
                   + power((arrived.lng - gone.lng) * cos(radians(gone.lat)), 2)
               ) AS metres
        FROM gone_places AS gone
        JOIN arrived_places AS arrived
          ON arrived.area = gone.area AND arrived.category = gone.category AND arrived.name = gone.name
    ) AS candidates
    WHERE metres <= $same_place_metres
) AS ranked
WHERE nearest_arrived = 1 AND nearest_gone = 1
"""

# A chain of reissues leads to the newest id: a campaign that missed a release moves its business in one step.
FOLLOW_REISSUED = f"""
UPDATE place_changes SET new_id = latest.new_id
FROM place_changes AS latest
WHERE latest.changed_at = $now AND latest.old_id IS NOT NULL AND latest.new_id IS NOT NULL
  AND (latest.area, latest.category) IN (SELECT area, category FROM {PAIRS} AS pair)
  AND place_changes.new_id = latest.old_id AND place_changes.old_id IS NOT NULL AND place_changes.changed_at < $now
"""

# A gone place that matched no arrival is removed unless it is still somewhere: among this import's rows (it moved
# to another of its pairs) or in a pair this import does not replace (it moved to another cell or category).
RECORD_REMOVED = f"""
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id)
SELECT gone.area, gone.category, $release, $now, gone.id, NULL
FROM gone_places AS gone
WHERE NOT EXISTS (
    SELECT 1 FROM place_changes AS reissued
    WHERE reissued.changed_at = $now AND reissued.area = gone.area AND reissued.category = gone.category
      AND reissued.old_id = gone.id AND reissued.new_id IS NOT NULL
)
  AND NOT EXISTS (SELECT 1 FROM incoming_places AS i WHERE i.id = gone.id)
  AND NOT EXISTS (
    SELECT 1 FROM places AS elsewhere
    WHERE elsewhere.id = gone.id
      AND (elsewhere.area, elsewhere.category) NOT IN (SELECT area, category FROM {PAIRS} AS pair)
)
"""

# An arrival whose id was removed before, from this pair or another: the business is back.
RECORD_RETURNED = """
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id)
SELECT arrived.area, arrived.category, $release, $now, NULL, arrived.id
FROM arrived_places AS arrived
WHERE EXISTS (SELECT 1 FROM place_changes AS removed WHERE removed.old_id = arrived.id AND removed.new_id IS NULL)
"""

# The changes of a campaign's pairs that landed since its previous search.
_LANDED_CHANGES = """
FROM place_changes AS ch
WHERE (ch.area, ch.category) IN (SELECT unnest($areas::TEXT[]), unnest($categories::TEXT[]))
  AND ch.changed_at > $since
"""

COUNT_LANDED_CHANGES = f"""
SELECT count(*) FILTER (WHERE ch.old_id IS NOT NULL AND ch.new_id IS NOT NULL),
       count(*) FILTER (WHERE ch.old_id IS NULL OR ch.new_id IS NULL)
{_LANDED_CHANGES}
"""

_REISSUED = f"""
SELECT ch.old_id, min(ch.new_id) AS new_id {_LANDED_CHANGES} AND ch.old_id IS NOT NULL AND ch.new_id IS NOT NULL
GROUP BY ch.old_id
"""

# A business the campaign holds under its old id and, found since by another of its pairs, under its new one: the
# old row goes, so that it is listed once.
DROP_HELD_TWICE = f"""
DELETE FROM campaign_businesses
WHERE campaign_id = $campaign_id AND place_id IN (
    SELECT reissued.old_id FROM ({_REISSUED}) AS reissued
    WHERE EXISTS (
        SELECT 1 FROM campaign_businesses AS kept
        WHERE kept.campaign_id = $campaign_id AND kept.place_id = reissued.new_id
    )
)
"""

MOVE_TO_NEW_IDS = f"""
UPDATE campaign_businesses SET place_id = reissued.new_id
FROM ({_REISSUED}) AS reissued
WHERE campaign_businesses.campaign_id = $campaign_id AND campaign_businesses.place_id = reissued.old_id
"""

# Each place's latest removal or return decides; a return wins a tie (the place is in the release).
MARK_REMOVED = f"""
UPDATE campaign_businesses SET removed_in = latest.removed_in
FROM (
    SELECT id, removed_in FROM (
        SELECT coalesce(ch.old_id, ch.new_id) AS id, CASE WHEN ch.new_id IS NULL THEN ch.release END AS removed_in,
               row_number() OVER (
                   PARTITION BY coalesce(ch.old_id, ch.new_id) ORDER BY ch.changed_at DESC, ch.old_id NULLS FIRST
               ) AS newest
        {_LANDED_CHANGES} AND (ch.old_id IS NULL OR ch.new_id IS NULL)
    ) AS changes
    WHERE newest = 1
) AS latest
WHERE campaign_businesses.campaign_id = $campaign_id AND campaign_businesses.place_id = latest.id
"""


def record(tx: Transaction, landing: dict[str, list[str]], release: str, now: datetime) -> None:
    """Record what replacing the ``landing`` pairs' places with incoming_places changes about their ids, before
    the old places are deleted."""
    params = {**landing, "release": release, "now": now, "same_place_metres": SAME_PLACE_METRES}
    tx.analyze("incoming_places")
    tx.run(KEEP_GONE, **params)
    tx.run(KEEP_ARRIVED, **params)
    tx.analyze("gone_places", "arrived_places")
    tx.run(RECORD_REISSUED, **params)
    tx.run(FOLLOW_REISSUED, **params)
    tx.run(RECORD_REMOVED, **params)
    tx.run(RECORD_RETURNED, **params)


def apply(tx: Transaction, campaign_id: int, landed: list[tuple], since: datetime) -> int:
    """Apply to the campaign's businesses the changes of its ``landed`` pairs (area, category, imported_at) recorded
    since ``since``; returns how many businesses it dropped as held twice. One short statement when none changed."""
    params = {
        "areas": [area for area, _, _ in landed],
        "categories": [category for _, category, _ in landed],
        "since": since,
        "campaign_id": campaign_id,
    }
    [(reissued, removed_or_back)] = tx.rows(COUNT_LANDED_CHANGES, **params)
    dropped = 0
    if reissued:
        dropped = tx.written(DROP_HELD_TWICE, **params)
        tx.run(MOVE_TO_NEW_IDS, **params)
    if removed_or_back:
        tx.run(MARK_REMOVED, **params)
    return dropped
