"""One business once across releases: what a pair's import changed about its places' ids, recorded as its rows land
(``landing.land``), and applied to each campaign's businesses by the campaign's next search.

A campaign keeps its businesses by place id, and Overture reissues ids (a source replacing its feature, a matching
run again): without this the next search would add the same business again under its new id, and a campaign would
write to it twice. A place gone from the newest release would stay listed as if it were open, and one Overture marks
permanently closed would read as gone. Each landing records in place_changes, per pair:

- a place kept under a new id: ``old_id`` and ``new_id``. The evidence, in this order: a source record the two
  share (Overture's ``sources[]``, dataset and record_id), the gone place taking the nearest arrival that carries
  one of its records (two gone places whose records one arrival carries were merged into it; of a place split in
  two, the nearer part keeps the business); then, for the places left, a similar name nearby
  (``same_business.name_links``). An earlier change that led to ``old_id`` leads to ``new_id`` from then on;
- a place removed: ``old_id`` alone, gone from the pair and from every other pair that holds places;
- a place closed: ``old_id`` alone with ``closed``, a listed place (or the arrival its business moved to) that
  Overture now marks permanently_closed. Closed places never become places: no search lists one as new;
- a removed or closed place back, open: ``new_id`` alone.

A campaign's search applies the changes of its pairs that landed since its previous search before it adds what is
new: its businesses move to their new ids (a business it holds under two ids is kept once), and each business's
``removed_in`` and ``closed_in`` say the release it was removed or closed in, or nothing while it is listed.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING

from nakodo_dagster.same_business import REISSUE_METRES, Candidate, name_links
from nakodo_dagster.store.shared import EARTH_RADIUS_KM, PAIRS

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# Metres per degree of latitude on the sphere the searches measure on.
_METRES_PER_DEGREE = math.radians(EARTH_RADIUS_KM * 1000)
# The grid the name candidates are found on: rows REISSUE_METRES of latitude high, and columns as wide on the
# ground as measured along the row's latitude, one percent wider so that two places within reach are never more
# than a row and a column apart (within some 10 km of a pole, where the columns' widths change too fast, some are).
_GRID_DEGREES = REISSUE_METRES / _METRES_PER_DEGREE
_GRID_COLUMN_DEGREES = _GRID_DEGREES * 1.01


def _metres(gone: str, arrived: str) -> str:
    """Metres between two places (aliases), flat over the gone place's latitude: well within 0.1 % at 200 m."""
    return f"""{_METRES_PER_DEGREE!r} * sqrt(
        power({arrived}.lat - {gone}.lat, 2) + power(({arrived}.lng - {gone}.lng) * cos(radians({gone}.lat)), 2)
    )"""


# The landing pairs' places that the rows replace and do not bring back, and the rows that were not there: by id
# within the pair (a row of a place Overture marks permanently_closed too: a business may have moved to it). Kept
# aside once per landing, each with its source records one a row, with the planner told their sizes: PostgreSQL,
# guessing one row from the pairs' unnest, looped over the incoming rows once per place (7 s for one busy cell).
KEEP_GONE = f"""
CREATE TEMP TABLE gone_places AS
SELECT p.area, p.category, p.id, p.lat, p.lng, p.name, p.sources
FROM places AS p JOIN {PAIRS} AS pair ON p.area = pair.area AND p.category = pair.category
WHERE NOT EXISTS (
    SELECT 1 FROM incoming_places AS i WHERE i.area = p.area AND i.category = p.category AND i.id = p.id
)
"""

KEEP_ARRIVED = f"""
CREATE TEMP TABLE arrived_places AS
SELECT i.area, i.category, i.id, i.lat, i.lng, i.name, i.sources, i.closed
FROM incoming_places AS i JOIN {PAIRS} AS pair ON i.area = pair.area AND i.category = pair.category
WHERE NOT EXISTS (SELECT 1 FROM places AS p WHERE p.area = i.area AND p.category = i.category AND p.id = i.id)
"""

_SOURCE_ROWS = """
CREATE TEMP TABLE {name}_sources AS
SELECT area, category, id, lat, lng, unnest(string_to_array(sources, '|')) AS source
FROM {name}_places WHERE sources IS NOT NULL
"""
KEEP_GONE_SOURCES = _SOURCE_ROWS.format(name="gone")
KEEP_ARRIVED_SOURCES = _SOURCE_ROWS.format(name="arrived")

# A gone place and an arrival of its category (in any of the landing pairs: a place may cross a cell's edge) that
# carry one source record: the gone place takes the nearest such arrival. An arrival may take several gone places
# (merged into one), and an arrival under the gone place's own id is the same place moved, not a reissue.
RECORD_SHARED_SOURCE = f"""
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id)
SELECT area, category, $release, $now, old_id, new_id FROM (
    SELECT gone.area, gone.category, gone.id AS old_id, arrived.id AS new_id,
           row_number() OVER (
               PARTITION BY gone.area, gone.category, gone.id ORDER BY {_metres("gone", "arrived")}, arrived.id
           ) AS nearest
    FROM gone_sources AS gone
    JOIN arrived_sources AS arrived
      ON arrived.category = gone.category AND arrived.source = gone.source AND arrived.id <> gone.id
) AS shared
WHERE nearest = 1
"""

_GRID_ROW = "CAST(floor({alias}.lat / $grid) AS INTEGER)"


def _grid_column(alias: str, row: str) -> str:
    return f"CAST(floor({alias}.lng * cos(radians(({row}) * $grid)) / $grid_column) AS INTEGER)"


# What RECORD_SHARED_SOURCE linked in this landing: neither side is a candidate by name.
_LINKED_GONE = """EXISTS (
    SELECT 1 FROM place_changes AS link
    WHERE link.changed_at = $now AND link.old_id = {alias}.id AND link.area = {alias}.area
      AND link.category = {alias}.category AND link.new_id IS NOT NULL
)"""
_LINKED_ARRIVED = (
    "EXISTS (SELECT 1 FROM place_changes AS link WHERE link.changed_at = $now AND link.new_id = {alias}.id)"
)

# Gone places and arrivals of one pair within REISSUE_METRES, neither linked by a source record, for the name rule:
# found on a grid (each gone place looks in its own and the eight cells around it), so that what it costs grows with
# the places near one another, not with the pair's gone times its arrived.
NAME_CANDIDATES = f"""
WITH gone AS (
    SELECT g.area, g.category, g.id, g.lat, g.lng, g.name, {_GRID_ROW.format(alias="g")} + near.rows AS grid_row,
           near.columns
    FROM gone_places AS g
    CROSS JOIN (VALUES (-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 0), (0, 1), (1, -1), (1, 0), (1, 1))
        AS near (rows, columns)
    WHERE NOT {_LINKED_GONE.format(alias="g")}
), gone_cells AS (
    SELECT gone.*, {_grid_column("gone", "gone.grid_row")} + gone.columns AS grid_column FROM gone
), arrived AS (
    SELECT a.area, a.category, a.id, a.lat, a.lng, a.name, {_GRID_ROW.format(alias="a")} AS grid_row,
           {_grid_column("a", _GRID_ROW.format(alias="a"))} AS grid_column
    FROM arrived_places AS a
    WHERE NOT {_LINKED_ARRIVED.format(alias="a")}
)
SELECT gone.area, gone.category, gone.id, arrived.id, {_metres("gone", "arrived")}, gone.name, arrived.name
FROM gone_cells AS gone
JOIN arrived ON arrived.area = gone.area AND arrived.category = gone.category
  AND arrived.grid_row = gone.grid_row AND arrived.grid_column = gone.grid_column
WHERE {_metres("gone", "arrived")} <= $reach
"""

RECORD_SAME_NAME = """
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id)
SELECT unnest($link_areas::TEXT[]), unnest($link_categories::TEXT[]), $release, $now,
       unnest($old_ids::TEXT[]), unnest($new_ids::TEXT[])
"""

# A chain of reissues leads to the newest id: a campaign that missed a release moves its business in one step.
FOLLOW_REISSUED = f"""
UPDATE place_changes SET new_id = latest.new_id
FROM place_changes AS latest
WHERE latest.changed_at = $now AND latest.old_id IS NOT NULL AND latest.new_id IS NOT NULL
  AND (latest.area, latest.category) IN (SELECT area, category FROM {PAIRS} AS pair)
  AND place_changes.new_id = latest.old_id AND place_changes.old_id IS NOT NULL AND place_changes.changed_at < $now
"""

# A gone place that matched no arrival is removed unless it is still somewhere: among the landing rows (it moved
# to another of its pairs) or in a pair this landing does not replace (it moved to another cell or category).
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

# A listed place that Overture now marks permanently_closed, and an arrival so marked that a gone place's business
# moved to: closed in this release.
RECORD_CLOSED = f"""
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id, closed)
SELECT i.area, i.category, $release, $now, i.id, NULL, TRUE
FROM incoming_places AS i
JOIN {PAIRS} AS pair ON i.area = pair.area AND i.category = pair.category
JOIN places AS p ON p.area = i.area AND p.category = i.category AND p.id = i.id
WHERE i.closed
UNION ALL
SELECT arrived.area, arrived.category, $release, $now, arrived.id, NULL, TRUE
FROM arrived_places AS arrived
WHERE arrived.closed AND {_LINKED_ARRIVED.format(alias="arrived")}
"""

# An open arrival whose id was removed or closed before, in this pair or another: the business is back.
RECORD_RETURNED = """
INSERT INTO place_changes (area, category, release, changed_at, old_id, new_id)
SELECT arrived.area, arrived.category, $release, $now, NULL, arrived.id
FROM arrived_places AS arrived
WHERE NOT arrived.closed
  AND EXISTS (SELECT 1 FROM place_changes AS removed WHERE removed.old_id = arrived.id AND removed.new_id IS NULL)
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

# A business the campaign holds under its old id and, found since by another of its pairs, under its new one, or
# under two old ids that were merged into one: the old row goes (of two merged, the one with the higher id), so that
# it is listed once.
DROP_HELD_TWICE = f"""
DELETE FROM campaign_businesses
WHERE campaign_id = $campaign_id AND place_id IN (
    SELECT reissued.old_id FROM ({_REISSUED}) AS reissued
    WHERE EXISTS (
        SELECT 1 FROM campaign_businesses AS kept
        WHERE kept.campaign_id = $campaign_id AND kept.place_id = reissued.new_id
    ) OR EXISTS (
        SELECT 1 FROM ({_REISSUED}) AS merged
        JOIN campaign_businesses AS kept ON kept.campaign_id = $campaign_id AND kept.place_id = merged.old_id
        WHERE merged.new_id = reissued.new_id AND merged.old_id < reissued.old_id
    )
)
"""

MOVE_TO_NEW_IDS = f"""
UPDATE campaign_businesses SET place_id = reissued.new_id
FROM ({_REISSUED}) AS reissued
WHERE campaign_businesses.campaign_id = $campaign_id AND campaign_businesses.place_id = reissued.old_id
"""

# Each place's latest removal, closure or return decides; a return wins a tie (the place is in the release).
MARK_REMOVED_OR_CLOSED = f"""
UPDATE campaign_businesses SET removed_in = latest.removed_in, closed_in = latest.closed_in
FROM (
    SELECT id, removed_in, closed_in FROM (
        SELECT coalesce(ch.old_id, ch.new_id) AS id,
               CASE WHEN ch.new_id IS NULL AND NOT ch.closed THEN ch.release END AS removed_in,
               CASE WHEN ch.new_id IS NULL AND ch.closed THEN ch.release END AS closed_in,
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
    the old places are deleted (``landing.land``)."""
    params = {**landing, "release": release, "now": now}
    tx.analyze("incoming_places")
    tx.run(KEEP_GONE, **params)
    tx.run(KEEP_ARRIVED, **params)
    tx.run(KEEP_GONE_SOURCES)
    tx.run(KEEP_ARRIVED_SOURCES)
    tx.analyze("gone_places", "arrived_places", "gone_sources", "arrived_sources")
    tx.run(RECORD_SHARED_SOURCE, **params)
    grid = {"grid": _GRID_DEGREES, "grid_column": _GRID_COLUMN_DEGREES, "reach": REISSUE_METRES}
    links = name_links(Candidate(*row) for row in tx.rows(NAME_CANDIDATES, **params, **grid))
    if links:
        tx.run(
            RECORD_SAME_NAME,
            **params,
            link_areas=[link.area for link in links],
            link_categories=[link.category for link in links],
            old_ids=[link.old_id for link in links],
            new_ids=[link.new_id for link in links],
        )
    tx.run(FOLLOW_REISSUED, **params)
    tx.run(RECORD_REMOVED, **params)
    tx.run(RECORD_CLOSED, **params)
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
        tx.run(MARK_REMOVED_OR_CLOSED, **params)
    return dropped
