"""The store's SQL, each statement written once with ``$name`` parameters in SQL both DuckDB and PostgreSQL accept.

The freshness rule is ``pair_state``, built from placement.Cutoffs; ``Store`` passes each statement only the
parameters it names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Mean Earth radius (IUGG): haversine on this sphere is within about 0.5 % of the WGS84 geodesic.
EARTH_RADIUS_KM = 6371.0088
RADIANS_PER_DEGREE = math.pi / 180
HALF_RADIANS_PER_DEGREE = math.pi / 360

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
TEXT_OR_JSON_COLUMNS = ("address", "websites", "phones")
RESULT_COLUMNS = ("id", "name", "category", "lat", "lng", "distance_km", "address", "websites", "phones", "country")

SCHEMA_VERSION = "SELECT coalesce(max(version), 0) FROM schema_migrations"

# A list of (area, category) pairs as two arrays zipped in one SELECT: one parameter, whatever the count.
PAIRS = "(SELECT unnest($areas::TEXT[]) AS area, unnest($categories::TEXT[]) AS category)"

IMPORT_COLUMNS = "area, category, release, rows, imported_at, failure"

IMPORT_ROWS = f"""
SELECT {IMPORT_COLUMNS} FROM place_imports
WHERE area IN (SELECT unnest($areas::TEXT[])) AND category IN (SELECT unnest($categories::TEXT[]))
"""


def pair_state(row: str) -> str:
    """placement.Cutoffs in SQL, for the place_imports columns of ``row`` (a table name of this module, never
    user text): the one rule for fresh, on its way, failed and missing; no row at all is missing. A mark whose
    failure was recorded is never on its way."""
    return f"""CASE
        WHEN {row}.release IS NULL THEN 'missing'
        WHEN {row}.release <> $requested THEN CASE WHEN {row}.imported_at > $fresh_after THEN 'fresh' ELSE 'missing' END
        WHEN {row}.failure IS NULL AND {row}.imported_at > $coming_after THEN 'coming'
        WHEN {row}.imported_at > $retry_after THEN 'failed'
        ELSE 'missing'
    END"""


# The compare and set: whatever comes back is ours to import, and nothing else is. The WHERE restates the
# rule from the other side (only a missing pair is taken over); $force is the analyst's deliberate override.
ON_CONFLICT_MISSING = f"""
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, rows = 0, imported_at = excluded.imported_at, failure = NULL
WHERE $force OR {pair_state("place_imports")} = 'missing'
RETURNING area, category
"""

# Sorted so that two PostgreSQL callers lock overlapping rows in the same order and never deadlock.
MARK = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT area, category, $requested, 0, $stamp FROM {PAIRS} AS wanted
ORDER BY area, category
{ON_CONFLICT_MISSING}
"""

# The campaigns' kept areas times their categories: every active campaign ($everyone), or the active ones of the
# campaigns named (a sync of one campaign). Never a paused one, named or not: only active campaigns are held to
# their account's plan, so imports obey the plans by asking for nothing else.
CAMPAIGN_PAIRS = """
FROM campaigns AS c
JOIN campaign_areas AS ca ON ca.campaign_id = c.id
JOIN campaign_categories AS cc ON cc.campaign_id = c.id
LEFT JOIN place_imports ON place_imports.area = ca.area AND place_imports.category = cc.category
WHERE c.status = 'active' AND ($everyone OR c.id IN (SELECT unnest($campaign_ids::INTEGER[])))
"""

# The campaigns (all, or those named) their account's plan paused: what the import sensor leaves out and says so.
PAUSED_FOR_PLAN = """
SELECT count(*) FROM campaigns
WHERE paused_reason IS NOT NULL AND ($everyone OR id IN (SELECT unnest($campaign_ids::INTEGER[])))
"""

# The blocks (import runs) holding a pair an account's campaign needs and misses, per account: its oldest campaign
# missing a pair there, and the oldest whose first pair (its centre's area, its first category) is one of them.
# Grouped by block, not by pair: a few thousand groups rather than millions. The fleet's is kept (line_demand)
# and looked at again only for the blocks the coverage counts noted (line_due, copied to relined).
_MISSING_DEMAND = f"""
SELECT ca.block, c.account_id, min(c.id) AS oldest_campaign,
       min(c.id) FILTER (WHERE ca.area = c.first_area AND cc.rank = 0) AS first_of
{CAMPAIGN_PAIRS} AND {pair_state("place_imports")} = 'missing'
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
# changed are written the same way.
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
        SELECT area, category, release, imported_at, failure FROM place_imports
        WHERE place_imports.area = areas.area OFFSET 0
    ) AS marked
)
SELECT needed.block, needed.area, needed.category, {pair_state("place_imports")} = 'missing' AS missing
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
CREATE_CAMPAIGN_BLOCK_PAIRS = f"""
CREATE TEMP TABLE block_pairs AS
SELECT block, count(*) AS pairs FROM (
    SELECT DISTINCT ca.block, ca.area, cc.category {CAMPAIGN_PAIRS} AND {pair_state("place_imports")} = 'missing'
) AS missing
GROUP BY block
"""

LINE_TOTALS = "SELECT count(*), coalesce(sum(pairs), 0) FROM new_line"

# Marks on their way, found through the imported_at index rather than by joining every campaign's pairs.
COMING_PAIRS = """
SELECT count(*) FROM place_imports WHERE release = $requested AND imported_at > $coming_after AND failure IS NULL
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
{CAMPAIGN_PAIRS} AND ca.block IN (SELECT block FROM admitted_blocks) AND {pair_state("place_imports")} = 'missing'
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
WHERE needed_pairs.campaigns > 0 AND {pair_state("place_imports")} = 'missing'
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
# campaign's blocks wait in the line.
CAMPAIGN_LINES = f"""
WITH placed AS (
    SELECT block, row_number() OVER (ORDER BY {LINE_ORDER}) AS place FROM import_line
),
waiting AS (
    SELECT ca.campaign_id, count(DISTINCT ca.block) AS blocks
    FROM campaign_areas AS ca JOIN import_line AS line ON line.block = ca.block
    GROUP BY ca.campaign_id
)
SELECT c.id, c.name, a.name, {pair_state("place_imports")}, placed.place, coalesce(waiting.blocks, 0)
FROM campaigns AS c
JOIN accounts AS a ON a.id = c.account_id
JOIN campaign_areas AS ca ON ca.campaign_id = c.id AND ca.area = c.first_area
JOIN campaign_categories AS cc ON cc.campaign_id = c.id AND cc.rank = 0
LEFT JOIN place_imports ON place_imports.area = ca.area AND place_imports.category = cc.category
LEFT JOIN placed ON placed.block = ca.block
LEFT JOIN waiting ON waiting.campaign_id = c.id
WHERE c.status = 'active' AND ($everyone OR c.id IN (SELECT unnest($campaign_ids::INTEGER[])))
ORDER BY c.id
"""
LINE_SUMMARY = "SELECT count(*), coalesce(sum(pairs), 0) FROM import_line"

NEEDS_MISSING = f"""
SELECT DISTINCT ca.area, cc.category {CAMPAIGN_PAIRS} AND {pair_state("place_imports")} = 'missing'
ORDER BY ca.area, cc.category
"""
NEEDS_COMING = f"""
SELECT DISTINCT ca.area {CAMPAIGN_PAIRS}
AND place_imports.release = $requested AND place_imports.imported_at > $coming_after AND place_imports.failure IS NULL
"""
NEEDS_ARRIVED_AT = f"SELECT max(place_imports.imported_at) {CAMPAIGN_PAIRS} AND place_imports.release <> $requested"

# Marks a run should exist for by now, by stamp: younger than the launch grace the run may still be being
# launched; from IMPORT_HOURS on a mark reads as failed and nobody waits on it, and a failed one at once.
AWAITING_RUN = """
SELECT imported_at, count(*) FROM place_imports
WHERE release = $requested AND imported_at > $coming_after AND imported_at <= $launched_before AND failure IS NULL
GROUP BY imported_at ORDER BY imported_at
"""

STAMPED = """
SELECT area, category FROM place_imports WHERE release = $requested AND imported_at = $stamp AND failure IS NULL
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

# Keyed on the exact stamp this caller wrote: never another caller's mark, even on the same pair.
TAKE_BACK = f"""
DELETE FROM place_imports USING {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND place_imports.release = $requested AND place_imports.imported_at = $stamp AND place_imports.failure IS NULL
RETURNING place_imports.area, place_imports.category
"""

# Keyed, like the take-back, on the run's exact stamp: an analyst's or a newer tick's mark on the same pair is
# another import on its way and stays as it is. The failure's own time replaces the asking time: the row then
# says when and why it failed, and its block runs RETRY_DAYS from there.
MARK_FAILED = f"""
UPDATE place_imports SET imported_at = $failed_at, failure = $failure FROM {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND place_imports.release = $requested AND place_imports.imported_at = $stamp AND place_imports.failure IS NULL
RETURNING place_imports.area, place_imports.category
"""

DELETE_PLACES = f"""
DELETE FROM places USING {PAIRS} AS pair
WHERE places.area = pair.area AND places.category = pair.category
"""

CREATE_INCOMING = """
CREATE TEMP TABLE incoming_places (
    id TEXT, area TEXT, category TEXT, name TEXT, lat DOUBLE PRECISION, lng DOUBLE PRECISION,
    confidence DOUBLE PRECISION, address TEXT, country TEXT, websites TEXT, phones TEXT
)
"""

# A place's columns, as places (and the drift gate's held_places) keep them, and the incoming rows (alias i) as
# places of $release.
PLACE_COLUMNS = "area, category, id, name, lat, lng, confidence, address, country, websites, phones, release"
INCOMING_AS_PLACES = (
    "i.area, i.category, i.id, i.name, i.lat, i.lng, i.confidence, i.address, i.country, i.websites, i.phones, $release"
)

# The join on the run's pairs is what keeps a run from writing a pair somebody else reserved.
INSERT_PLACES = f"""
INSERT INTO places ({PLACE_COLUMNS})
SELECT {INCOMING_AS_PLACES}
FROM incoming_places AS i JOIN {PAIRS} AS pair ON pair.area = i.area AND pair.category = i.category
"""

# Every pair is recorded, with zero rows if need be: "this area has no cafes" is a result.
RECORD_IMPORTS = f"""
INSERT INTO place_imports (area, category, release, places_release, rows, imported_at)
SELECT pair.area, pair.category, $release, $release, count(i.id), $now
FROM {PAIRS} AS pair
LEFT JOIN incoming_places AS i ON i.area = pair.area AND i.category = pair.category
GROUP BY pair.area, pair.category
ORDER BY pair.area, pair.category
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, places_release = excluded.places_release, rows = excluded.rows,
    imported_at = excluded.imported_at, failure = NULL
RETURNING area, category, rows
"""

# Marks on their way that another import holds ($stamp is the writer's own; a run without one holds none): the
# write still lands, since a release read is the same for whoever reads it, but the run says whose it replaced.
OTHERS_ON_THEIR_WAY = f"""
SELECT place_imports.area, place_imports.category, place_imports.imported_at
FROM place_imports JOIN {PAIRS} AS pair ON place_imports.area = pair.area AND place_imports.category = pair.category
WHERE place_imports.release = $requested AND place_imports.imported_at > $coming_after
  AND place_imports.failure IS NULL AND place_imports.imported_at IS DISTINCT FROM $stamp
ORDER BY place_imports.area, place_imports.category
"""

STAMP_IMPORTS = f"""
UPDATE place_imports SET imported_at = $committed_at FROM {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
"""

COUNT_PLACES = f"""
SELECT places.area, places.category, count(*)
FROM places JOIN {PAIRS} AS pair ON places.area = pair.area AND places.category = pair.category
GROUP BY places.area, places.category
"""

CAMPAIGN_COLUMNS = "id, name, targeting, status, created_at, account_id, paused_reason"

ADD_CAMPAIGN = """
INSERT INTO campaigns (name, targeting, created_at, account_id) VALUES ($name, $targeting, $now, $account_id)
RETURNING id
"""

# A campaign paused by hand or resumed has no reason of the store's: only set_account_plan writes one.
SET_CAMPAIGN_STATUS = "UPDATE campaigns SET status = $status, paused_reason = NULL WHERE id = $id"

# Accounts and plans ---------------------------------------------------------------------------------------

ACCOUNT_COLUMNS = "id, name, plan, created_at"

# Nothing comes back when the name is taken.
ADD_ACCOUNT = """
INSERT INTO accounts (name, plan, created_at) VALUES ($name, $plan, $now)
ON CONFLICT (name) DO NOTHING
RETURNING id
"""

# Touching the account's row locks it until commit in PostgreSQL (DuckDB holds the whole file): whoever checks the
# same account's plan next waits, then sees what this transaction added.
LOCK_ACCOUNT = "UPDATE accounts SET plan = plan WHERE id = $account_id"

SET_ACCOUNT_PLAN = "UPDATE accounts SET plan = $plan WHERE id = $account_id"

# The areas each active campaign of the account needs, as kept beside the campaigns (placement.areas_for).
ACCOUNT_HOLDING = """
SELECT c.id, ca.area
FROM campaigns AS c LEFT JOIN campaign_areas AS ca ON ca.campaign_id = c.id
WHERE c.account_id = $account_id AND c.status = 'active'
"""

# Every account ($everyone) or one, with what its active campaigns hold (areas merged, countries among them) and
# how many of its campaigns its plan paused.
ACCOUNT_USAGE = """
SELECT a.id, a.name, a.plan, a.created_at,
       count(DISTINCT held.campaign_id), count(DISTINCT held.area),
       count(DISTINCT held.area) FILTER (WHERE held.area LIKE 'country:%'),
       (SELECT count(*) FROM campaigns AS p WHERE p.account_id = a.id AND p.paused_reason IS NOT NULL)
FROM accounts AS a
LEFT JOIN (
    SELECT c.account_id, c.id AS campaign_id, ca.area
    FROM campaigns AS c LEFT JOIN campaign_areas AS ca ON ca.campaign_id = c.id
    WHERE c.status = 'active'
) AS held ON held.account_id = a.id
WHERE $everyone OR a.id = $account_id
GROUP BY a.id, a.name, a.plan, a.created_at
ORDER BY a.id
"""

PAUSE_FOR_PLAN = """
UPDATE campaigns SET status = 'paused', paused_reason = paused.reason
FROM (SELECT unnest($campaign_ids::INTEGER[]) AS id, unnest($reasons::TEXT[]) AS reason) AS paused
WHERE campaigns.id = paused.id
"""

CAMPAIGN_ACCOUNTS = """
SELECT c.id, a.id, a.name, a.plan, a.created_at, c.status, c.paused_reason
FROM campaigns AS c JOIN accounts AS a ON a.id = c.account_id
WHERE c.id IN (SELECT unnest($campaign_ids::INTEGER[]))
"""

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

# The active campaigns' areas holding a moving pair: through the areas' index, then each campaign's categories. A
# campaign noted due is counted whole just after, and a later statement of the count sees every note this one saw.
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
INSERT INTO progress_due (campaign_id, due_at) VALUES ($campaign_id, $due_at)
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
SELECT lat, lng FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, place_id LIMIT $limit
"""


CAMPAIGN_RESULTS = f"""
SELECT place_id, {", ".join(RESULT_COLUMNS[1:])} FROM campaign_businesses WHERE campaign_id = $campaign_id
ORDER BY distance_km NULLS LAST, name NULLS LAST, place_id
"""

# The same four answers import_needs gives, counted per category; a failed mark past its week is due again.
IMPORT_STATUS = f"""
SELECT category,
       count(*) FILTER (WHERE state = 'fresh'),
       count(*) FILTER (WHERE state = 'coming'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'missing'),
       min(imported_at) FILTER (WHERE release <> $requested)
FROM (SELECT category, release, imported_at, {pair_state("place_imports")} AS state FROM place_imports) AS rows
GROUP BY category ORDER BY category
"""

# Only a mark that is no longer on its way goes (failed, or lost past IMPORT_HOURS): a mark on its way, a real
# release, or a mark another caller wrote a moment ago fails the WHERE and stays.
FORGET_FAILED_IMPORT = f"""
DELETE FROM place_imports
WHERE area = $area AND category = $category AND release = $requested
  AND (failure IS NOT NULL OR imported_at <= $coming_after)
RETURNING {IMPORT_COLUMNS}
"""

# What a campaign needs, kept when it is created or changed (placement.areas_for): the sensors join on it.
KEEP_CAMPAIGN_AREAS = """
INSERT INTO campaign_areas (campaign_id, area, block)
SELECT $campaign_id, unnest($areas::TEXT[]), unnest($blocks::TEXT[])
ON CONFLICT (campaign_id, area) DO NOTHING
RETURNING area
"""
KEEP_FIRST_AREA = "UPDATE campaigns SET first_area = $first_area WHERE id = $campaign_id"
KEEP_CAMPAIGN_CATEGORIES = """
INSERT INTO campaign_categories (campaign_id, category, rank)
SELECT $campaign_id, unnest($categories::TEXT[]), unnest($ranks::INTEGER[])
"""

PLACE_NAME_COLUMNS = "query, display_name, lat, lng, looked_up_at"

# Coverage -------------------------------------------------------------------------------------------------

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

# A campaign starts ($change 1) or stops (-1) needing its pairs: all of them, or only those of the areas named
# ($every_area false: a location just added). Returns each pair's count after: 1 after a start, or 0 after a
# stop, is a pair the fleet starts or stops needing. Sorted, so that two writers lock shared pairs in one order.
CHANGE_NEEDED_PAIRS = """
INSERT INTO needed_pairs (area, category, block, campaigns, changed_at)
SELECT ca.area, cc.category, ca.block, $change, $changed_at
FROM campaign_areas AS ca JOIN campaign_categories AS cc ON cc.campaign_id = ca.campaign_id
WHERE ca.campaign_id = $campaign_id AND ($every_area OR ca.area IN (SELECT unnest($areas::TEXT[])))
ORDER BY ca.area, cc.category
ON CONFLICT (area, category) DO UPDATE
SET campaigns = needed_pairs.campaigns + excluded.campaigns, changed_at = excluded.changed_at
RETURNING campaigns
"""
CHANGE_NEEDED_TOTAL = "UPDATE coverage_counts SET pairs = pairs + $change WHERE state = 'needed'"

# A pair's place_imports row deleted or marked failed, which its imported_at alone does not say. A pair nobody needs
# gets a row at 0 rather than a lookup first: sorted, like the others, so that no two writers deadlock.
TOUCH_NEEDED_PAIRS = """
INSERT INTO needed_pairs (area, category, block, campaigns, changed_at)
SELECT unnest($areas::TEXT[]) AS area, unnest($categories::TEXT[]) AS category, unnest($blocks::TEXT[]), 0,
       $changed_at
ORDER BY area, category
ON CONFLICT (area, category) DO UPDATE SET changed_at = excluded.changed_at
"""

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
