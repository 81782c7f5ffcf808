"""Each active campaign's progress, kept: its areas by import state (campaign_area_progress) and its counts
(campaign_progress), moved by what each coverage count restated and counted whole for the campaigns whose needs
changed; and ``search_progress``, the same counts worked out from the campaigns' pairs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nakodo_dagster.placement import REQUESTED
from nakodo_dagster.store.models import SearchProgress
from nakodo_dagster.store.shared import pair_state, rule

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# What one count moves at most, the rest left for the next: a tick after any change, however big (a release gone
# stale at once, a daemon back after a day), stays within seconds. A queued pair moves 1 to 3 campaign areas of a
# 10,000-campaign fleet.
PROGRESS_PAIRS_PER_COUNT = 10_000

# Every chosen campaign's areas by the state the map colours them with (on its way, then missing, then failed,
# else loaded), with the newest real import among its pairs, beside its search's times. One statement for all.
# Each campaign's areas by import state: on their way (any pair coming), missing (any pair missing and none
# coming), not loaded (any missing), failed (any failed, none coming or missing), and when real data last landed.
_PROGRESS_FROM_AREAS = """
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

PROGRESS_COUNTS = f"""
WITH chosen AS (
    SELECT id FROM campaigns
    WHERE ($everyone AND status = 'active') OR id IN (SELECT unnest($campaign_ids::INTEGER[]))
),
pair_states AS (
    SELECT ca.campaign_id, ca.area, {pair_state("place_imports")} AS state,
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
{_PROGRESS_FROM_AREAS}"""

PROGRESS_COLUMNS = "campaign_id, areas, coming, missing, not_loaded, failed, arrived_at"

SEARCH_PROGRESS = f"""
SELECT counts.campaign_id, c.name, counts.areas, counts.coming, counts.missing, counts.not_loaded, counts.failed,
       counts.arrived_at, s.window_start, s.requested_at, s.searched_at, s.searched_landed
FROM ({PROGRESS_COUNTS}) AS counts
JOIN campaigns AS c ON c.id = counts.campaign_id
LEFT JOIN campaign_searches AS s ON s.campaign_id = counts.campaign_id
ORDER BY counts.campaign_id
"""

# Kept progress ------------------------------------------------------------------------------------------------
#
# PROGRESS_COUNTS, kept and moved by what changed. campaign_area_progress holds the state of each active
# campaign's area that has a pair in coverage_pairs; an area without a row is missing (none of its pairs was ever
# asked for), so the untouched areas of a big fleet cost no row. Every coverage count moves the rows of the areas
# whose pairs it restated differently, and their campaigns' counts by the difference; a campaign whose needs
# changed (added, resumed, given a location) is counted whole, once (progress_due). Each statement is driven by a
# temp table of what changed and reaches the big tables through their keys: what a count costs follows what
# changed, and no plan joins two big tables whatever their statistics say. Recounting every campaign an area
# touched, through the kept coverage, took 188 s at 10,000 campaigns once admissions had marked 2,000 areas.


def area_progress(areas: str) -> str:
    """The campaign_area_progress rows of the (campaign_id, area) pairs in ``areas`` (a temp table of this module,
    never user text), from coverage_pairs: on their way (a pair coming), missing (a pair missing, or a category
    with no coverage row, and none coming), failed (a failed pair and neither), else loaded; whether a pair is to
    ask for (not_loaded, on its way or not); when real data last landed. An area with no coverage row has none."""
    return f"""
SELECT a.campaign_id, a.area,
       CASE WHEN bool_or(cp.state = 'coming') THEN 'coming'
            WHEN bool_or(cp.state = 'missing') OR count(*) < min(sizes.categories) THEN 'missing'
            WHEN bool_or(cp.state = 'failed') THEN 'failed'
            ELSE 'loaded' END AS state,
       bool_or(cp.state = 'missing') OR count(*) < min(sizes.categories) AS not_loaded,
       max(CASE WHEN cp.release <> $requested THEN cp.imported_at END) AS landed_at
FROM {areas} AS a
JOIN campaign_categories AS cc ON cc.campaign_id = a.campaign_id
JOIN coverage_pairs AS cp ON cp.area = a.area AND cp.category = cc.category
JOIN (
    SELECT campaign_id, count(*) AS categories FROM campaign_categories
    WHERE campaign_id IN (SELECT campaign_id FROM {areas})
    GROUP BY campaign_id
) AS sizes ON sizes.campaign_id = a.campaign_id
GROUP BY a.campaign_id, a.area
"""


# The restated pairs whose coverage row appeared, went, or changed, queued for their campaigns' areas.
QUEUE_MOVED_PAIRS = """
INSERT INTO progress_queue (area, category, noted_at)
SELECT area, category, CAST($now AS TIMESTAMPTZ) FROM restated
WHERE (state IS NULL AND was IS NOT NULL)
   OR (state IS NOT NULL AND (was IS NULL OR state <> was OR release <> was_release OR imported_at <> was_imported_at))
ON CONFLICT (area, category) DO NOTHING
"""

FORGET_PROGRESS_QUEUE = "DELETE FROM progress_queue"

# The oldest $pairs of the queue, taken: moved now.
CREATE_MOVING_PAIRS = """
CREATE TEMP TABLE moving_pairs AS
SELECT area, category FROM progress_queue ORDER BY noted_at, area, category LIMIT $pairs
"""

LEAVE_MOVING_PAIRS = """
DELETE FROM progress_queue USING moving_pairs
WHERE progress_queue.area = moving_pairs.area AND progress_queue.category = moving_pairs.category
"""

# The active campaigns' areas holding a moving pair: through the areas' index (a LATERAL subquery behind its fence,
# run per pair), then each campaign's categories, then the campaign, in this order (Transaction.written_order): the
# moving pairs drive, whatever the planner guesses of the campaigns (on a store never analyzed, 71 active of 10,000
# drove a nested loop over every moving pair that ran for minutes). A campaign noted due is counted whole just
# after, and a later statement of the count sees every note this one saw.
CREATE_AREAS_MOVED = """
CREATE TEMP TABLE areas_moved AS
SELECT DISTINCT ca.campaign_id, ca.area
FROM moving_pairs
CROSS JOIN LATERAL (
    SELECT campaign_id, area FROM campaign_areas WHERE campaign_areas.area = moving_pairs.area OFFSET 0
) AS ca
JOIN campaign_categories AS cc ON cc.campaign_id = ca.campaign_id AND cc.category = moving_pairs.category
JOIN campaigns AS c ON c.id = ca.campaign_id
WHERE c.status = 'active' AND ca.campaign_id NOT IN (SELECT campaign_id FROM progress_due)
"""

# Each moved area's row before (was_*) and after; a NULL state is no row (a missing area).
CREATE_AREA_MOVES = f"""
CREATE TEMP TABLE area_moves AS
SELECT moved.campaign_id, moved.area, old.state AS was, old.not_loaded AS was_not_loaded,
       old.landed_at AS was_landed_at, new.state, new.not_loaded, new.landed_at
FROM areas_moved AS moved
LEFT JOIN campaign_area_progress AS old ON old.campaign_id = moved.campaign_id AND old.area = moved.area
LEFT JOIN ({area_progress("areas_moved")}) AS new ON new.campaign_id = moved.campaign_id AND new.area = moved.area
"""

FORGET_MOVED_AREAS = """
DELETE FROM campaign_area_progress USING area_moves
WHERE campaign_area_progress.campaign_id = area_moves.campaign_id AND campaign_area_progress.area = area_moves.area
  AND area_moves.state IS NULL
"""

# Sorted: two writers lock overlapping rows in the same order (PostgreSQL).
KEEP_MOVED_AREAS = """
INSERT INTO campaign_area_progress (campaign_id, area, state, not_loaded, landed_at)
SELECT campaign_id, area, state, not_loaded, landed_at FROM area_moves WHERE state IS NOT NULL
ORDER BY campaign_id, area
ON CONFLICT (campaign_id, area) DO UPDATE
SET state = excluded.state, not_loaded = excluded.not_loaded, landed_at = excluded.landed_at
"""


def _adds(count: str, state: str, not_loaded: str) -> str:
    """What one area adds to its campaign's ``count`` (a campaign_progress column), given its row's ``state`` and
    ``not_loaded`` columns; a NULL state is no row, a missing area."""
    return {
        "coming": f"CASE WHEN {state} = 'coming' THEN 1 ELSE 0 END",
        "missing": f"CASE WHEN {state} IS NULL OR {state} = 'missing' THEN 1 ELSE 0 END",
        "not_loaded": f"CASE WHEN {state} IS NULL OR {not_loaded} THEN 1 ELSE 0 END",
        "failed": f"CASE WHEN {state} = 'failed' THEN 1 ELSE 0 END",
    }[count]


_COUNTS = ("coming", "missing", "not_loaded", "failed")

# Each moved campaign's counts moved by what its areas add now less what they added before. Its newest landing
# only grows, unless an area's landing went (its release asked for again): then it is read again from the rows.
MOVE_PROGRESS = f"""
UPDATE campaign_progress
SET {", ".join(f"{count} = campaign_progress.{count} + moved.{count}" for count in _COUNTS)},
    arrived_at = CASE
        WHEN moved.lowered THEN (
            SELECT max(kept.landed_at) FROM campaign_area_progress AS kept
            WHERE kept.campaign_id = campaign_progress.campaign_id
        )
        WHEN campaign_progress.arrived_at IS NULL OR moved.landed_at > campaign_progress.arrived_at
            THEN moved.landed_at
        ELSE campaign_progress.arrived_at END
FROM (
    SELECT campaign_id,
           {
    ", ".join(
        f"sum({_adds(count, 'state', 'not_loaded')} - {_adds(count, 'was', 'was_not_loaded')}) AS {count}"
        for count in _COUNTS
    )
},
           max(landed_at) AS landed_at,
           bool_or(was_landed_at IS NOT NULL AND (landed_at IS NULL OR landed_at < was_landed_at)) AS lowered
    FROM area_moves
    GROUP BY campaign_id
) AS moved
WHERE campaign_progress.campaign_id = moved.campaign_id
"""

AREAS_MOVED = "SELECT count(*) FROM area_moves"

# A campaign to count whole at the next count: its needs changed. due_at tells this note from a newer one, which a
# count that read this one must leave for the next.
NOTE_PROGRESS_DUE = """
INSERT INTO progress_due (campaign_id, due_at) SELECT unnest($campaign_ids::INTEGER[]), CAST($due_at AS TIMESTAMPTZ)
ON CONFLICT (campaign_id) DO UPDATE SET due_at = excluded.due_at
"""

FORGET_CAMPAIGN_PROGRESS = (
    "DELETE FROM campaign_area_progress WHERE campaign_id = $campaign_id",
    "DELETE FROM campaign_progress WHERE campaign_id = $campaign_id",
)

# The campaigns counted whole: those noted due ($everyone false), or every active campaign (a count from scratch).
CREATE_DUE_READ = "CREATE TEMP TABLE due_read AS SELECT campaign_id, due_at FROM progress_due"

CREATE_COUNTED_CAMPAIGNS = """
CREATE TEMP TABLE counted_campaigns AS
SELECT id FROM campaigns
WHERE status = 'active' AND ($everyone OR id IN (SELECT campaign_id FROM due_read))
"""

# Their areas that may have a row: every area of a campaign counted alone; from scratch, only the areas holding a
# coverage row (a fleet's first count has none, and an area without one has no row).
CREATE_COUNTED_AREAS = """
CREATE TEMP TABLE counted_areas AS
SELECT ca.campaign_id, ca.area FROM campaign_areas AS ca
WHERE NOT $everyone AND ca.campaign_id IN (SELECT id FROM counted_campaigns)
UNION ALL
SELECT DISTINCT ca.campaign_id, ca.area
FROM coverage_pairs AS cp
JOIN campaign_areas AS ca ON ca.area = cp.area
JOIN counted_campaigns AS counted ON counted.id = ca.campaign_id
WHERE $everyone
"""

FORGET_COUNTED_AREAS = """
DELETE FROM campaign_area_progress WHERE $everyone OR campaign_id IN (SELECT campaign_id FROM due_read)
"""

KEEP_COUNTED_AREAS = f"""
INSERT INTO campaign_area_progress (campaign_id, area, state, not_loaded, landed_at)
SELECT campaign_id, area, state, not_loaded, landed_at FROM ({area_progress("counted_areas")}) AS counted
ORDER BY campaign_id, area
"""

FORGET_UNCOUNTED_PROGRESS = """
DELETE FROM campaign_progress
WHERE ($everyone OR campaign_id IN (SELECT campaign_id FROM due_read))
  AND campaign_id NOT IN (SELECT id FROM counted_campaigns)
"""

# An area without a row is missing: the campaign's areas less its rows.
KEEP_COUNTED_PROGRESS = f"""
INSERT INTO campaign_progress ({PROGRESS_COLUMNS})
SELECT counted.id, coalesce(sizes.areas, 0), coalesce(kept.coming, 0),
       coalesce(sizes.areas, 0) - coalesce(kept.rows, 0) + coalesce(kept.missing, 0),
       coalesce(sizes.areas, 0) - coalesce(kept.rows, 0) + coalesce(kept.not_loaded, 0),
       coalesce(kept.failed, 0), kept.arrived_at
FROM counted_campaigns AS counted
LEFT JOIN (
    SELECT campaign_id, count(*) AS areas FROM campaign_areas
    WHERE campaign_id IN (SELECT id FROM counted_campaigns) GROUP BY campaign_id
) AS sizes ON sizes.campaign_id = counted.id
LEFT JOIN (
    SELECT campaign_id, count(*) AS rows, count(*) FILTER (WHERE state = 'coming') AS coming,
           count(*) FILTER (WHERE state = 'missing') AS missing, count(*) FILTER (WHERE not_loaded) AS not_loaded,
           count(*) FILTER (WHERE state = 'failed') AS failed, max(landed_at) AS arrived_at
    FROM campaign_area_progress
    WHERE campaign_id IN (SELECT id FROM counted_campaigns)
    GROUP BY campaign_id
) AS kept ON kept.campaign_id = counted.id
ORDER BY counted.id
ON CONFLICT (campaign_id) DO UPDATE
SET areas = excluded.areas, coming = excluded.coming, missing = excluded.missing,
    not_loaded = excluded.not_loaded, failed = excluded.failed, arrived_at = excluded.arrived_at
"""

LEAVE_DUE = """
DELETE FROM progress_due USING due_read
WHERE progress_due.campaign_id = due_read.campaign_id AND progress_due.due_at = due_read.due_at
"""

COUNTED_AREAS = "SELECT count(*) FROM counted_areas"

_KEPT_PROGRESS = """
SELECT p.campaign_id, c.name, p.areas, p.coming, p.missing, p.not_loaded, p.failed, p.arrived_at,
       s.window_start, s.requested_at, s.searched_at, s.searched_landed
FROM campaign_progress AS p
JOIN campaigns AS c ON c.id = p.campaign_id AND c.status = 'active'
LEFT JOIN campaign_searches AS s ON s.campaign_id = p.campaign_id
"""

KEPT_PROGRESS = f"{_KEPT_PROGRESS} ORDER BY p.campaign_id"

# The kept progress of the campaigns whose search may be due at $now (search_sensor.due_reason decides): a new
# day's window, places landed that their last search has not read, or imports pending while they wait; not one
# asked for a moment ago and not begun. A superset of the due, read in the database: a tick hands Python the
# campaigns it may search, not the fleet.
MAYBE_DUE_PROGRESS = f"""{_KEPT_PROGRESS}
WHERE NOT (s.requested_at IS NOT NULL AND s.requested_at > $in_flight_after
           AND (s.searched_at IS NULL OR s.searched_at < s.requested_at))
  AND (s.window_start IS NULL OR s.searched_at IS NULL OR s.window_start <= $new_day_before
       OR (p.arrived_at IS NOT NULL AND (s.searched_landed IS NULL OR p.arrived_at > s.searched_landed))
       OR ((p.coming > 0 OR p.missing > 0) AND s.window_start > $waiting_after AND s.searched_at <= $again_before))
ORDER BY p.campaign_id
"""

KEPT_PROGRESS_SIZE = "SELECT count(*) FROM campaign_progress"


def note_due(tx: Transaction, campaign_ids: Iterable[int]) -> None:
    """The campaigns' needs changed: the next count counts their progress whole."""
    tx.run(NOTE_PROGRESS_DUE, campaign_ids=list(campaign_ids), due_at=datetime.now(UTC))


def forget(tx: Transaction, campaign_ids: Iterable[int]) -> None:
    """Paused campaigns keep no progress: a campaign resumed is counted whole again."""
    for campaign_id in campaign_ids:
        for statement in FORGET_CAMPAIGN_PROGRESS:
            tx.run(statement, campaign_id=campaign_id)


def forget_queue(tx: Transaction) -> None:
    """Nothing waits to move: every campaign is about to be counted whole."""
    tx.run(FORGET_PROGRESS_QUEUE)


def move(tx: Transaction, now: datetime) -> int:
    """Queue the pairs a coverage count restated differently (the temp table restated), and move the areas of the
    oldest PROGRESS_PAIRS_PER_COUNT queued and their campaigns' counts; returns the (campaign, area) rows moved."""
    tx.run(QUEUE_MOVED_PAIRS, now=now)
    tx.run(CREATE_MOVING_PAIRS, pairs=PROGRESS_PAIRS_PER_COUNT)
    tx.analyze("moving_pairs")
    tx.run(LEAVE_MOVING_PAIRS)
    with tx.written_order():
        tx.run(CREATE_AREAS_MOVED)
    tx.analyze("areas_moved")
    tx.run(CREATE_AREA_MOVES, requested=REQUESTED)
    tx.run(FORGET_MOVED_AREAS)
    tx.run(KEEP_MOVED_AREAS)
    tx.run(MOVE_PROGRESS)
    [(moved,)] = tx.rows(AREAS_MOVED)
    return moved


def count_whole(tx: Transaction, *, everyone: bool) -> int:
    """Count the progress of the campaigns noted due, or of every active campaign, from the kept coverage; a
    campaign noted since this count read the notes stays noted. Returns the (campaign, area) rows looked at."""
    tx.run(CREATE_DUE_READ, everyone=everyone)
    tx.analyze("due_read")
    tx.run(CREATE_COUNTED_CAMPAIGNS, everyone=everyone)
    tx.run(CREATE_COUNTED_AREAS, everyone=everyone)
    tx.analyze("counted_campaigns", "counted_areas")
    tx.run(FORGET_COUNTED_AREAS, everyone=everyone)
    tx.run(KEEP_COUNTED_AREAS, requested=REQUESTED)
    tx.run(FORGET_UNCOUNTED_PROGRESS, everyone=everyone)
    tx.run(KEEP_COUNTED_PROGRESS)
    tx.run(LEAVE_DUE)
    return tx.rows(COUNTED_AREAS)[0][0]


def search_progress(tx: Transaction, now: datetime, campaigns: dict[str, Any]) -> list[SearchProgress]:
    """The progress at ``now`` of every active campaign, or exactly the campaigns named (``shared.chosen``'s
    parameters), from their pairs."""
    rows = tx.rows(SEARCH_PROGRESS, **rule(now), **campaigns)
    return [SearchProgress(*row) for row in rows]


def kept(tx: Transaction) -> list[SearchProgress]:
    """Every active campaign's progress as last kept."""
    return [SearchProgress(*row) for row in tx.rows(KEPT_PROGRESS)]
