"""Asking for imports: the missing pairs lined up in fair-share order, the line's head admitted and marked in one
compare and set, and where each campaign stands in the line."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from nakodo_dagster.placement import import_runs, parse_area_key, run_block
from nakodo_dagster.store import coverage
from nakodo_dagster.store.marks import ON_CONFLICT_MISSING
from nakodo_dagster.store.models import CampaignLine, Reservation, ServedCampaigns
from nakodo_dagster.store.shared import CAMPAIGN_PAIRS, MISSING, chosen, on_its_way, pair_state, rule
from nakodo_dagster.store.transaction import by_area

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# What one look works out again at most, the rest left for the next: a tick after any change, however big (a release
# gone stale at once, a daemon back after a day), stays within seconds. A block holds about 500 of its campaigns'
# pairs at 10,000 campaigns, and 500 blocks took 0.3 to 0.65 s of a look's statements (a cold start's 10,765 blocks
# are lined up over 43 looks at 250, campaigns' first blocks first, while the queue admits about 12 blocks a look).
LINE_BLOCKS_PER_LOOK = 250
# The names of the campaigns an import run serves that a reservation hands back: more than its tag shows.
SERVED_NAMES = 40


# The campaigns (all, or those named) their account's plan paused: what the import sensor leaves out and says so.
PAUSED_FOR_PLAN = f"""
SELECT count(*) FROM campaigns
WHERE paused_reason IS NOT NULL AND {chosen("id")}
"""

# The blocks (import runs) holding a pair an account's campaign needs and misses, per account: its oldest campaign
# missing a pair there, and the oldest whose first pair (its centre's area, its first category) is one of them.
# Grouped by block, not by pair: a few thousand groups rather than millions. The fleet's is kept (line_demand)
# and looked at again only for the blocks the coverage counts noted (line_due, copied to relined).
_MISSING_DEMAND = f"""
SELECT ca.block, c.account_id, min(c.id) AS oldest_campaign,
       min(c.id) FILTER (WHERE ca.area = c.first_area AND cc.rank = 0) AS first_of
{CAMPAIGN_PAIRS} AND {MISSING}
"""

CREATE_MISSING = f"CREATE TEMP TABLE missing_demand AS {_MISSING_DEMAND} GROUP BY ca.block, c.account_id"

# The blocks a look works out again, a campaign's first block before the rest (a new campaign's goes in line at
# once, whatever else is noted), then the oldest noted.
CREATE_RELINED = """
CREATE TEMP TABLE relined AS
SELECT block FROM line_due ORDER BY first_block DESC, noted_at, block LIMIT $blocks
"""

RELINED = "SELECT count(*) FROM relined"

FORGET_RELINED_DEMAND = "DELETE FROM line_demand WHERE block IN (SELECT block FROM relined)"

FORGET_RELINED_PAIRS = "DELETE FROM line_pairs WHERE block IN (SELECT block FROM relined)"

# The pairs the fleet's active campaigns need (needed_pairs) in the relined blocks, each with whether it is
# missing: read once, and both how many pairs each block misses and which accounts' campaigns miss them come from
# here. Driven by the relined blocks, each one's needed pairs through the index on block and each of their areas'
# marks through the key's first column, whatever the statistics say: a LATERAL subquery that PostgreSQL may not
# pull up into the join (OFFSET 0) is run per row. Planned as joins, PostgreSQL read all 820,000 campaign areas of
# a 10,000-campaign fleet to find those of 7 blocks (0.35 s) when its statistics of campaigns were stale, and
# place_imports whole once per block when its statistics were those of a cold start; looked up pair by pair, the
# marks of 250 blocks took 0.24 s against 0.16 s. The statements below that are driven by a temp table of what
# changed are written the same way, and run with their joins in the written order (Transaction.written_order):
# else a table the planner guessed small is joined inside the loop, once per row.
CREATE_RELINED_NEEDED = f"""
CREATE TEMP TABLE relined_needed AS
WITH needed AS (
    SELECT needed_pairs.block, needed_pairs.area, needed_pairs.category
    FROM relined
    CROSS JOIN LATERAL (
        SELECT area, category, block FROM needed_pairs
        WHERE needed_pairs.block = relined.block AND needed_pairs.campaigns > 0 OFFSET 0
    ) AS needed_pairs
),
marks AS (
    SELECT marked.*
    FROM (SELECT DISTINCT area FROM needed) AS areas
    CROSS JOIN LATERAL (
        SELECT area, category, release, imported_at, failure, roll_out FROM place_imports
        WHERE place_imports.area = areas.area OFFSET 0
    ) AS marked
)
SELECT needed.block, needed.area, needed.category, {MISSING} AS missing
FROM needed
LEFT JOIN marks AS place_imports ON place_imports.area = needed.area AND place_imports.category = needed.category
"""

# The relined blocks that miss a pair, how many they miss, and whether they miss every pair they hold (whole).
CREATE_RELINED_BLOCKS = """
CREATE TEMP TABLE relined_blocks AS
SELECT block, count(*) FILTER (WHERE missing) AS pairs, bool_and(missing) AS whole
FROM relined_needed GROUP BY block HAVING bool_or(missing)
"""

KEEP_RELINED_PAIRS = "INSERT INTO line_pairs (block, pairs) SELECT block, pairs FROM relined_blocks"

# The accounts whose active campaigns miss a pair there, per relined block, each block's campaign areas through
# the index on block. Where a block misses every pair it holds (the cold start's blocks, and every block once a
# release ages), each of its campaign areas misses all its pairs and its categories need not be joined: looking
# up every campaign area's every category in place_imports was the look's most costly statement, and these
# blocks now read a fifth of the rows.
KEEP_WHOLE_BLOCKS_DEMAND = """
INSERT INTO line_demand (block, account_id, oldest_campaign, first_of)
SELECT ca.block, c.account_id, min(c.id) AS oldest_campaign, min(c.id) FILTER (WHERE ca.area = c.first_area)
FROM relined_blocks
CROSS JOIN LATERAL (
    SELECT campaign_id, area, block FROM campaign_areas WHERE campaign_areas.block = relined_blocks.block OFFSET 0
) AS ca
JOIN campaigns AS c ON c.id = ca.campaign_id
WHERE relined_blocks.whole AND c.status = 'active'
GROUP BY ca.block, c.account_id
"""

PARTIAL_BLOCKS = "SELECT count(*) FROM relined_blocks WHERE NOT whole"

KEEP_PARTIAL_BLOCKS_DEMAND = """
INSERT INTO line_demand (block, account_id, oldest_campaign, first_of)
SELECT ca.block, c.account_id, min(c.id) AS oldest_campaign,
       min(c.id) FILTER (WHERE ca.area = c.first_area AND cc.rank = 0) AS first_of
FROM relined_blocks
CROSS JOIN LATERAL (
    SELECT campaign_id, area, block FROM campaign_areas WHERE campaign_areas.block = relined_blocks.block OFFSET 0
) AS ca
JOIN campaigns AS c ON c.id = ca.campaign_id
JOIN campaign_categories AS cc ON cc.campaign_id = c.id
JOIN (
    SELECT area, category FROM relined_needed
    WHERE missing AND block IN (SELECT block FROM relined_blocks WHERE NOT whole)
) AS missing ON missing.area = ca.area AND missing.category = cc.category
WHERE NOT relined_blocks.whole AND c.status = 'active'
GROUP BY ca.block, c.account_id
"""

LEAVE_RELINED = "DELETE FROM line_due WHERE block IN (SELECT block FROM relined)"

CREATE_CAMPAIGN_BLOCK_PAIRS = f"""
CREATE TEMP TABLE block_pairs AS
SELECT block, count(*) AS pairs FROM (
    SELECT DISTINCT ca.block, ca.area, cc.category {CAMPAIGN_PAIRS} AND {MISSING}
) AS missing
GROUP BY block
"""

LINE_TOTALS = "SELECT count(*), coalesce(sum(pairs), 0) FROM new_line"

# Marks on their way, found through the imported_at index rather than by joining every campaign's pairs.
COMING_PAIRS = f"""
SELECT count(*) FROM place_imports WHERE {on_its_way("place_imports")}
"""


# Fair share: the line of missing blocks, in the order admission takes them. Each account lines its blocks up:
# every campaign's first block (oldest campaign first), then the remaining blocks (oldest campaign first). The
# accounts then take turns, so one account's backlog never stands before another account's first block; a block
# several accounts need takes its best place.
def line_up(demand: str, pairs: str) -> str:
    """The line, as new_line, of ``demand`` (missing_demand or line_demand) and ``pairs`` (block_pairs or
    line_pairs): tables of this module, never user text."""
    return f"""
CREATE TEMP TABLE new_line AS
WITH turns AS (
    SELECT block, account_id, first_of IS NOT NULL AS first_block,
           row_number() OVER (
               PARTITION BY account_id ORDER BY first_of IS NULL, coalesce(first_of, oldest_campaign), block
           ) AS turn
    FROM {demand}
)
SELECT turns.block, min(turn) AS turn, bool_or(first_block) AS first_block, min(account_id) AS account_id,
       min(counted.pairs) AS pairs
FROM turns JOIN {pairs} AS counted ON counted.block = turns.block
GROUP BY turns.block
"""


# The whole fleet's line is kept between ticks (import_line): a tick with nothing changed admits from its head
# without finding every missing pair again. A sync of some campaigns uses its own line (new_line) and leaves it.
# Written last in a tick, after the reservation: two daemons ticking at once meet at the compare and set, and the
# second to write the line replaces what the first wrote.
FORGET_LINE = "DELETE FROM import_line"
KEEP_LINE = """
INSERT INTO import_line (block, turn, first_block, account_id, pairs)
SELECT block, turn, first_block, account_id, pairs FROM new_line
WHERE block NOT IN (SELECT block FROM admitted_blocks)
ON CONFLICT (block) DO UPDATE
SET turn = excluded.turn, first_block = excluded.first_block, account_id = excluded.account_id, pairs = excluded.pairs
"""


# The order admission takes a line in: turns first, a first block before the rest within a turn.
LINE_ORDER = "turn, first_block DESC, account_id, block"


def admit_from(line: str) -> str:
    """The first $max_runs blocks of ``line`` (``import_line`` or ``new_line``, never user text), into the temp
    table admitted_blocks."""
    return f"""
CREATE TEMP TABLE admitted_blocks AS
SELECT block, turn, first_block, account_id FROM {line}
ORDER BY {LINE_ORDER}
LIMIT $max_runs
"""


ADMITTED_ORDER = f"SELECT block, first_block FROM admitted_blocks ORDER BY {LINE_ORDER}"

# The admitted blocks' missing pairs, found again for those blocks alone (the line may be a few ticks old) and
# marked in the same compare and set as ever.
RESERVE_ADMITTED = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT DISTINCT ca.area, cc.category, $requested, 0, $stamp
{CAMPAIGN_PAIRS} AND ca.block IN (SELECT block FROM admitted_blocks) AND {MISSING}
ORDER BY 1, 2
{ON_CONFLICT_MISSING}
"""

# The fleet's admitted blocks' missing pairs, from the pairs its active campaigns need (needed_pairs) per block
# through the index on block, marked in the same compare and set. Joined from every campaign's areas and
# categories instead, as a sync of some campaigns does (RESERVE_ADMITTED), 20 blocks took 1.0 to 1.4 s at 10,000
# campaigns with stale statistics.
RESERVE_ADMITTED_NEEDED = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT needed_pairs.area, needed_pairs.category, $requested, 0, $stamp
FROM admitted_blocks
CROSS JOIN LATERAL (
    SELECT area, category, campaigns FROM needed_pairs WHERE needed_pairs.block = admitted_blocks.block OFFSET 0
) AS needed_pairs
LEFT JOIN place_imports ON place_imports.area = needed_pairs.area AND place_imports.category = needed_pairs.category
WHERE needed_pairs.campaigns > 0 AND {MISSING}
ORDER BY 1, 2
{ON_CONFLICT_MISSING}
"""

LEAVE_LINE = "DELETE FROM import_line WHERE block IN (SELECT block FROM admitted_blocks)"

# The active campaigns each reserved block serves (they need one of the pairs just marked with $stamp): from the
# marks through the imported_at index, each mark's campaign areas through the areas' index, and each of those
# campaigns' categories through its key, whatever the statistics say (with those of a cold start PostgreSQL joined
# every campaign's categories with the marks first: 3 million rows, 17 s). The first $names of a block by id, and
# how many in all: an import run's tag names them.
SERVED_CAMPAIGNS = """
WITH served AS (
    SELECT DISTINCT ca.block, c.id, c.name
    FROM place_imports AS marked
    CROSS JOIN LATERAL (
        SELECT campaign_id, block FROM campaign_areas WHERE campaign_areas.area = marked.area OFFSET 0
    ) AS ca
    CROSS JOIN LATERAL (
        SELECT campaign_id FROM campaign_categories AS cc
        WHERE cc.campaign_id = ca.campaign_id AND cc.category = marked.category OFFSET 0
    ) AS needing
    JOIN campaigns AS c ON c.id = needing.campaign_id
    WHERE marked.imported_at = $stamp AND c.status = 'active'
),
ranked AS (
    SELECT block, name, row_number() OVER (PARTITION BY block ORDER BY id) AS place,
           count(*) OVER (PARTITION BY block) AS campaigns
    FROM served
)
SELECT block, name, campaigns FROM ranked WHERE place <= $names ORDER BY block, place
"""

# Where each active campaign (every one, or those named) stands for its first businesses: its first pair's state by
# the one rule, and, while that pair waits for admission, its block's place in the kept line; then how many of the
# campaign's blocks wait in the line. A first pair that holds places has given the campaign its first businesses,
# whatever its next import is doing: moving to a newer release, failed or held.
CAMPAIGN_LINES = f"""
WITH placed AS (
    SELECT block, row_number() OVER (ORDER BY {LINE_ORDER}) AS place FROM import_line
),
waiting AS (
    SELECT ca.campaign_id, count(DISTINCT ca.block) AS blocks
    FROM campaign_areas AS ca JOIN import_line AS line ON line.block = ca.block
    GROUP BY ca.campaign_id
)
SELECT c.id, c.name, a.name,
       CASE WHEN place_imports.places_release IS NOT NULL THEN 'fresh' ELSE {pair_state("place_imports")} END,
       placed.place, coalesce(waiting.blocks, 0)
FROM campaigns AS c
JOIN accounts AS a ON a.id = c.account_id
JOIN campaign_areas AS ca ON ca.campaign_id = c.id AND ca.area = c.first_area
JOIN campaign_categories AS cc ON cc.campaign_id = c.id AND cc.rank = 0
LEFT JOIN place_imports ON place_imports.area = ca.area AND place_imports.category = cc.category
LEFT JOIN placed ON placed.block = ca.block
LEFT JOIN waiting ON waiting.campaign_id = c.id
WHERE c.status = 'active' AND {chosen("c.id")}
ORDER BY c.id
"""
LINE_SUMMARY = "SELECT count(*), coalesce(sum(pairs), 0) FROM import_line"


def reline(tx: Transaction, at: dict[str, Any]) -> int:
    """Work out again the kept demand (line_demand) and missing pairs (line_pairs) of the oldest noted blocks, at
    most LINE_BLOCKS_PER_LOOK, campaigns' first blocks first; returns how many were looked at."""
    tx.run(CREATE_RELINED, blocks=LINE_BLOCKS_PER_LOOK)
    tx.analyze("relined")
    [(relined,)] = tx.rows(RELINED)
    tx.run(CREATE_RELINED_NEEDED, **at)
    tx.run(CREATE_RELINED_BLOCKS)
    tx.analyze("relined_blocks")
    tx.run(FORGET_RELINED_DEMAND)
    [(partial,)] = tx.rows(PARTIAL_BLOCKS)
    with tx.written_order():
        tx.run(KEEP_WHOLE_BLOCKS_DEMAND)
        if partial:
            tx.run(KEEP_PARTIAL_BLOCKS_DEMAND)
    tx.run(FORGET_RELINED_PAIRS)
    tx.run(KEEP_RELINED_PAIRS)
    tx.run(LEAVE_RELINED)
    return relined


# What ``reserve`` finds, in the order ``reservation`` takes it.
Reserved = tuple[int, int, int, int, list[tuple], list[tuple], int, list[tuple]]


def reserve(tx: Transaction, now: datetime, max_runs: int, campaigns: dict[str, Any], *, relook: bool) -> Reserved:
    """The reservation's work in the database (``Store.reserve_missing``): the counts, the pairs reserved, the
    admitted blocks in line order, the blocks relined and the campaigns served; ``reservation`` groups them.
    ``campaigns``: the parameters of ``shared.chosen``."""
    # A sync of some campaigns lines up its own, and leaves the fleet's line as it is.
    keep_line = campaigns["everyone"]
    relook = relook or not keep_line
    line = "new_line" if relook else "import_line"
    at = rule(now)
    relined = 0
    if relook and keep_line:
        # The coverage count notes the blocks whose pairs changed since it last counted: only those are
        # looked at again, and the fleet's kept demand lined up.
        coverage.recount(tx, now)
        relined = reline(tx, at)
        tx.run(line_up("line_demand", "line_pairs"))
    elif relook:
        tx.run(CREATE_MISSING, **at, **campaigns)
        tx.run(CREATE_CAMPAIGN_BLOCK_PAIRS, **at, **campaigns)
        tx.run(line_up("missing_demand", "block_pairs"))
    [(missing_runs, missing_pairs)] = tx.rows(LINE_TOTALS if relook else LINE_SUMMARY)
    [(coming_pairs,)] = tx.rows(COMING_PAIRS, **at)
    [(paused_for_plan,)] = tx.rows(PAUSED_FOR_PLAN, **campaigns)
    tx.run(admit_from(line), max_runs=max_runs)
    tx.analyze("admitted_blocks")
    order = tx.rows(ADMITTED_ORDER)
    if not order:
        reserved = []
    elif keep_line:
        with tx.written_order():
            reserved = tx.rows(RESERVE_ADMITTED_NEEDED, **at, stamp=now, force=False)
    else:
        reserved = tx.rows(RESERVE_ADMITTED, **at, **campaigns, stamp=now, force=False)
    with tx.written_order():
        served = tx.rows(SERVED_CAMPAIGNS, stamp=now, names=SERVED_NAMES) if reserved else []
    if keep_line and relook:
        tx.run(FORGET_LINE)
        tx.run(KEEP_LINE)
    elif keep_line:
        tx.run(LEAVE_LINE)
    return missing_pairs, missing_runs, coming_pairs, paused_for_plan, reserved, order, relined, served


def reservation(
    now: datetime, reserved: tuple[int, int, int, int, list[tuple], list[tuple], int, list[tuple]]
) -> Reservation:
    """What ``reserve`` found, grouped: the runs in line order, the campaigns each serves."""
    missing_pairs, missing_runs, coming_pairs, paused_for_plan, pairs, order, relined, served = reserved
    by_pair_area = by_area(pairs)
    runs = import_runs(by_pair_area, {key: parse_area_key(key) for key in by_pair_area})
    turn = {block: position for position, (block, _) in enumerate(order)}
    runs.sort(key=lambda run: turn[run_block(run)])
    first_blocks = {block for block, first in order if first}
    first_runs = frozenset(run.key for run in runs if run_block(run) in first_blocks)
    by_block: dict[str, ServedCampaigns] = {}
    for block, name, count in served:
        named = by_block.get(block, ServedCampaigns((), count))
        by_block[block] = ServedCampaigns((*named.names, name), count)
    by_run = {run.key: by_block.get(run_block(run), ServedCampaigns((), 0)) for run in runs}
    return Reservation(
        now, runs, missing_runs, missing_pairs, coming_pairs, paused_for_plan, first_runs, relined, by_run
    )


def import_line(tx: Transaction, now: datetime, campaigns: dict[str, Any]) -> tuple[int, list[CampaignLine]]:
    """How many blocks wait in the kept line, and where each of ``campaigns`` (``shared.chosen``) stands in it."""
    [(blocks, _)] = tx.rows(LINE_SUMMARY)
    rows = tx.rows(CAMPAIGN_LINES, **rule(now), **campaigns)
    return blocks, [CampaignLine(*row) for row in rows]
