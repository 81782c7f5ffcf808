"""The coverage count: the state of every pair the active campaigns need, kept in coverage_pairs and counted per
state, and worked out again only for the pairs that may have changed since the last count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from nakodo_dagster.placement import Cutoffs
from nakodo_dagster.store import progress, shared
from nakodo_dagster.store.models import PAIR_STATES, Coverage, NeededPair
from nakodo_dagster.store.shared import EVER, pair_state, rule

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# A count's ranges start after a moment (CREATE_RECOUNT); a change stamped at the very moment a count vouches
# for may commit after it, so the next starts this much earlier and reads it (both stores keep microseconds).
_JUST_BEFORE = timedelta(microseconds=1)
# A count reads at most this many pairs of each of its ranges (CREATE_RECOUNT), oldest first, and the next
# goes on from where it stopped: 200 campaigns added at once change about 80,000 needed pairs, a new release
# makes every loaded pair due within a minute, and one count of all of them took 11 to 17 s at 10,000 campaigns;
# 10,000 a range kept every tick under 6 s, and restating them still dominated most ticks.
COUNT_PAIRS_PER_RANGE = 5_000
# A moment no change reaches: a count afresh reads needs from place_imports alone.
_NEVER = datetime(9999, 1, 1, tzinfo=UTC)


class Recount(NamedTuple):
    """What one coverage count worked out again."""

    pairs: int
    campaign_areas: int


def _import_ranges_through(moment: datetime) -> dict[str, datetime]:
    """The place_imports ranges of a count that saw everything up to ``moment``: the rows dated up to it, and
    those that crossed each freshness boundary by then."""
    crossed = {f"{boundary}_through": value for boundary, value in _boundaries(moment).items()}
    return {"imports_through": moment, **crossed}


def _boundaries(moment: datetime) -> dict[str, datetime]:
    cutoffs = Cutoffs.at(moment)
    return {"fresh": cutoffs.fresh_after, "coming": cutoffs.coming_after, "retry": cutoffs.retry_after}


LOCK_COVERAGE_COUNTED = """
UPDATE coverage_counted SET counted_at = counted_at WHERE id = 1
RETURNING counted_at, needs_through, imports_through, fresh_through, coming_through, retry_through
"""

COUNTED_AT = "SELECT counted_at FROM coverage_counted"

KEEP_IMPORT_RANGES = """
UPDATE coverage_counted
SET imports_through = $imports_through, fresh_through = $fresh_through, coming_through = $coming_through,
    retry_through = $retry_through
"""

FORGET_COVERAGE = "DELETE FROM coverage_pairs"

FORGET_COVERAGE_COUNTS = "UPDATE coverage_counts SET pairs = 0 WHERE state <> 'needed'"


def _count_range_cut(table: str, column: str) -> str:
    """How many rows of ``table`` (a table of the store, never user text) have ``column`` after $start up to $end,
    at most $pairs of them, and the latest such time among the first $pairs: a count that takes $pairs rows of a
    range stops there, and the next goes on from it. Through the column's index, $pairs entries at most."""
    return f"""
SELECT count(*), max(moment) FROM (
    SELECT {column} AS moment FROM {table} WHERE {column} > $start AND {column} <= $end ORDER BY {column} LIMIT $pairs
) AS taken
"""


NEEDS_RANGE_CUT = _count_range_cut("needed_pairs", "changed_at")

IMPORTS_RANGE_CUT = _count_range_cut("place_imports", "imported_at")

# The ranges of a coverage count (CREATE_RECOUNT), each kept in coverage_counted as ``{name}_through``, with
# the statement that finds where COUNT_PAIRS_PER_RANGE of its rows end.
COUNT_RANGES = (
    ("needs", NEEDS_RANGE_CUT),
    ("imports", IMPORTS_RANGE_CUT),
    ("fresh", IMPORTS_RANGE_CUT),
    ("coming", IMPORTS_RANGE_CUT),
    ("retry", IMPORTS_RANGE_CUT),
)


# The pairs whose state may have moved since the last count, range by range (after *_start, up to *_end): needs
# changed (needed_pairs.changed_at); place_imports rows asked for, loaded or dated (imports); and those crossing a
# freshness boundary (fresh, coming, retry: placement.Cutoffs between the last count's and this one's). Every
# range is an index's.
CREATE_RECOUNT = """
CREATE TEMP TABLE recount AS
SELECT area, category FROM needed_pairs WHERE changed_at > $needs_start AND changed_at <= $needs_end
UNION
SELECT area, category FROM place_imports
WHERE (imported_at > $imports_start AND imported_at <= $imports_end)
   OR (imported_at > $fresh_start AND imported_at <= $fresh_end)
   OR (imported_at > $coming_start AND imported_at <= $coming_end)
   OR (imported_at > $retry_start AND imported_at <= $retry_end)
"""

# Each recounted pair's state and row as counted (was_*) and now (state NULL: not needed, or never asked for).
CREATE_RESTATED = f"""
CREATE TEMP TABLE restated AS
SELECT recount.area, recount.category, coverage_pairs.state AS was, coverage_pairs.release AS was_release,
       coverage_pairs.imported_at AS was_imported_at,
       CASE WHEN needed_pairs.campaigns > 0 AND place_imports.release IS NOT NULL
            THEN {pair_state("place_imports")} END AS state,
       place_imports.release, place_imports.imported_at
FROM recount
LEFT JOIN needed_pairs ON needed_pairs.area = recount.area AND needed_pairs.category = recount.category
LEFT JOIN place_imports ON place_imports.area = recount.area AND place_imports.category = recount.category
LEFT JOIN coverage_pairs ON coverage_pairs.area = recount.area AND coverage_pairs.category = recount.category
"""

MOVE_COVERAGE_COUNTS = """
UPDATE coverage_counts SET pairs = coverage_counts.pairs + moved.change
FROM (
    SELECT state, sum(change) AS change FROM (
        SELECT was AS state, -1 AS change FROM restated WHERE was IS NOT NULL
        UNION ALL
        SELECT state, 1 AS change FROM restated WHERE state IS NOT NULL
    ) AS changes
    GROUP BY state
) AS moved
WHERE coverage_counts.state = moved.state
"""

FORGET_RESTATED = """
DELETE FROM coverage_pairs USING restated
WHERE coverage_pairs.area = restated.area AND coverage_pairs.category = restated.category AND restated.state IS NULL
"""

KEEP_RESTATED = """
INSERT INTO coverage_pairs (area, category, state, release, imported_at)
SELECT area, category, state, release, imported_at FROM restated
WHERE state IS NOT NULL
  AND (was IS NULL OR state <> was OR release <> was_release OR imported_at <> was_imported_at)
ON CONFLICT (area, category) DO UPDATE
SET state = excluded.state, release = excluded.release, imported_at = excluded.imported_at
"""

RECOUNTED = "SELECT count(*) FROM restated"

# The blocks of the pairs a coverage count restated: their place in the line may have moved (every needed block,
# when the count starts from scratch). The reservation's look works out only these again.
# A block holds a campaign's first pair if a restated pair is one: the restated pairs that are an active campaign's
# first area (through the index on it) and first category, joined rather than looked for pair by pair (an EXISTS
# per restated pair made the count's noting four times as costly at 10,000 campaigns: 0.32 s against 0.09 s).
NOTE_RESTATED_LINE_DUE = """
WITH firsts AS (
    SELECT DISTINCT restated.area, restated.category
    FROM restated
    JOIN campaigns AS c ON c.first_area = restated.area
    JOIN campaign_categories AS cc ON cc.campaign_id = c.id AND cc.rank = 0 AND cc.category = restated.category
    WHERE c.status = 'active'
)
INSERT INTO line_due (block, noted_at, first_block)
SELECT needed_pairs.block, CAST($now AS TIMESTAMPTZ), bool_or(firsts.area IS NOT NULL)
FROM restated
JOIN needed_pairs ON needed_pairs.area = restated.area AND needed_pairs.category = restated.category
LEFT JOIN firsts ON firsts.area = restated.area AND firsts.category = restated.category
GROUP BY needed_pairs.block
ON CONFLICT (block) DO UPDATE SET first_block = line_due.first_block OR excluded.first_block
"""

NOTE_EVERY_LINE_DUE = """
INSERT INTO line_due (block, noted_at, first_block)
SELECT needed.block, CAST($now AS TIMESTAMPTZ), firsts.block IS NOT NULL
FROM (SELECT DISTINCT block FROM needed_pairs) AS needed
LEFT JOIN (
    SELECT DISTINCT ca.block FROM campaigns AS c
    JOIN campaign_areas AS ca ON ca.campaign_id = c.id AND ca.area = c.first_area
    WHERE c.status = 'active'
) AS firsts ON firsts.block = needed.block
ON CONFLICT (block) DO UPDATE SET first_block = line_due.first_block OR excluded.first_block
"""

KEEP_COVERAGE_COUNTED = """
UPDATE coverage_counted
SET counted_at = $counted_at, needs_through = $needs_through, imports_through = $imports_through,
    fresh_through = $fresh_through, coming_through = $coming_through, retry_through = $retry_through
"""

COVERAGE_COUNTS = "SELECT state, pairs FROM coverage_counts"

# PostgreSQL only: the rows coverage_pairs had when last analysed (-1: never), and analysing it.
COVERAGE_PAIRS_ESTIMATE = "SELECT reltuples FROM pg_class WHERE oid = 'coverage_pairs'::regclass"

ANALYZE_COVERAGE_PAIRS = "ANALYZE coverage_pairs"

# A state's oldest pairs that have a place_imports row, through coverage_pairs_by_state, with why a failed one
# failed.
COVERAGE_LISTED = """
SELECT listed.area, listed.category, listed.state, listed.release, listed.imported_at, place_imports.failure
FROM (
    SELECT area, category, state, release, imported_at FROM coverage_pairs WHERE state = $state
    ORDER BY imported_at, area, category LIMIT $listed
) AS listed
LEFT JOIN place_imports ON place_imports.area = listed.area AND place_imports.category = listed.category
ORDER BY listed.imported_at, listed.area, listed.category
"""

# Needed pairs never asked for (no place_imports row when last counted), in key order.
NEVER_ASKED_LISTED = """
SELECT area, category FROM needed_pairs
WHERE campaigns > 0 AND NOT EXISTS (
    SELECT 1 FROM coverage_pairs
    WHERE coverage_pairs.area = needed_pairs.area AND coverage_pairs.category = needed_pairs.category
)
ORDER BY area, category LIMIT $listed
"""


def recount(tx: Transaction, now: datetime) -> Recount:
    """Work out again the state of every needed pair that may have changed since the last count, and move the kept
    progress by what moved (``Store.recount_coverage``)."""
    started = datetime.now(UTC)
    [(counted_at, *through)] = tx.rows(LOCK_COVERAGE_COUNTED)
    starts = dict(zip((name for name, _ in COUNT_RANGES), through, strict=True))
    # Where each range ends now, and up to when a count that reads all of it vouches for it: a change is
    # stamped before its commit, so the last COMMIT_OVERLAP of changes is read again by the next count.
    ends = {"needs": _NEVER, "imports": _NEVER, **_boundaries(now)}
    overlap = shared.COMMIT_OVERLAP + _JUST_BEFORE
    vouched = {"needs": started - overlap, "imports": now - overlap, **_boundaries(now)}
    from_scratch = counted_at == EVER or now < counted_at
    if from_scratch:
        # Counted afresh: every pair with a place_imports row, whatever their number. One without is missing,
        # as it was; a change to its needs alone moves only the needed count, which its writer keeps.
        tx.run(FORGET_COVERAGE)
        tx.run(FORGET_COVERAGE_COUNTS)
        starts = {"needs": _NEVER, "imports": EVER, **_boundaries(now)}
    else:
        for name, cut in COUNT_RANGES:
            [(taken, last)] = tx.rows(cut, start=starts[name], end=ends[name], pairs=COUNT_PAIRS_PER_RANGE)
            if taken == COUNT_PAIRS_PER_RANGE:
                # The rest of the range waits for the next count, which starts after the last time taken
                # (every row of that time is taken with it, so none is left between two counts).
                ends[name] = last
                vouched[name] = min(last, vouched[name])
    ranges = {
        f"{name}_{edge}": moment for edge, edges in (("start", starts), ("end", ends)) for name, moment in edges.items()
    }
    tx.run(CREATE_RECOUNT, **ranges)
    # Its size known: after a take-back or a release aging, it holds tens of thousands of pairs, not a page's guess.
    tx.analyze("recount")
    with tx.written_order():
        tx.run(CREATE_RESTATED, **rule(now))
    tx.analyze("restated")
    tx.run(MOVE_COVERAGE_COUNTS)
    tx.run(NOTE_EVERY_LINE_DUE if from_scratch else NOTE_RESTATED_LINE_DUE, now=now)
    tx.run(FORGET_RESTATED)
    tx.run(KEEP_RESTATED)
    if from_scratch:
        # Every campaign is counted whole below.
        progress.forget_queue(tx)
        moved = 0
    else:
        moved = progress.move(tx, now)
    counted = progress.count_whole(tx, everyone=from_scratch)
    through = {f"{name}_through": at for name, at in vouched.items()}
    tx.run(KEEP_COVERAGE_COUNTED, counted_at=now, **through)
    [(recounted,)] = tx.rows(RECOUNTED)
    tx.keep_coverage_statistics(recounted)
    return Recount(recounted, moved + counted)


def coverage(tx: Transaction, now: datetime, listed: int) -> Coverage:
    """The needed pairs counted per state at ``now``, and at most ``listed`` of each state (``Store.coverage``)."""
    recounted = recount(tx, now).pairs
    kept = dict(tx.rows(COVERAGE_COUNTS))
    counts = {state: kept[state] for state in PAIR_STATES if state != "missing"}
    # Missing is what the other states leave of the needed pairs. A write landing between the count
    # and this read can make it a pair or two off until the next count, never below zero.
    counts["missing"] = max(0, kept["needed"] - sum(counts.values()))
    listed_pairs = []
    for state in PAIR_STATES:
        if state == "missing" and counts["missing"] > kept["missing"]:
            never_asked = tx.rows(NEVER_ASKED_LISTED, listed=listed)
            listed_pairs += [NeededPair(area, category, state, None, None) for area, category in never_asked]
            room = listed - len(never_asked)
        else:
            room = listed
        if room > 0:
            listed_pairs += [NeededPair(*row) for row in tx.rows(COVERAGE_LISTED, state=state, listed=room)]
    return Coverage({state: counts[state] for state in PAIR_STATES}, listed_pairs, recounted)


def start_import_ranges(tx: Transaction) -> None:
    """The schema's version 14 keeps where the count stopped in each range: start them where the count before it
    would have started its next, the minute before it."""
    [(counted_at,)] = tx.rows(COUNTED_AT)
    moment = counted_at - shared.COMMIT_OVERLAP - _JUST_BEFORE
    tx.run(KEEP_IMPORT_RANGES, **_import_ranges_through(moment))
