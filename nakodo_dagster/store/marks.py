"""The marks in place_imports: a pair asked for (reserved, or forced by an analyst), taken back unused, failed,
or forgotten after failing; and the marks still waiting for their run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from nakodo_dagster.placement import LAUNCH_GRACE_MINUTES, REQUESTED, PlaceImport, block_key, parse_area_key
from nakodo_dagster.store import needs
from nakodo_dagster.store.shared import IMPORT_COLUMNS, MISSING, PAIRS, on_its_way, rule
from nakodo_dagster.store.transaction import pair_params

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

Pair = tuple[str, str]


def stamped(row: str) -> str:
    """A mark of ``row`` (a table name of the store, never user text) that this caller wrote: its exact $stamp,
    never another caller's mark, even on the same pair, and not failed yet."""
    return f"{row}.release = $requested AND {row}.imported_at = $stamp AND {row}.failure IS NULL"


# The compare and set: whatever comes back is ours to import, and nothing else is. The WHERE restates the
# rule from the other side (only a missing pair is taken over); $force is the analyst's deliberate override. A
# roll-out request ends here: asked for, the pair moves, fails or is held like any other.
ON_CONFLICT_MISSING = f"""
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, rows = 0, imported_at = excluded.imported_at, failure = NULL, roll_out = NULL
WHERE $force OR {MISSING}
RETURNING area, category
"""

# Sorted so that two PostgreSQL callers lock overlapping rows in the same order and never deadlock.
MARK = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT area, category, $requested, 0, $stamp FROM {PAIRS} AS wanted
ORDER BY area, category
{ON_CONFLICT_MISSING}
"""


# Keyed on the exact stamp this caller wrote.
TAKE_BACK = f"""
DELETE FROM place_imports USING {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND {stamped("place_imports")}
RETURNING place_imports.area, place_imports.category
"""

# Keyed, like the take-back, on the run's exact stamp: an analyst's or a newer tick's mark on the same pair is
# another import on its way and stays as it is. The failure's own time replaces the asking time: the row then
# says when and why it failed, and its block runs RETRY_DAYS from there.
MARK_FAILED = f"""
UPDATE place_imports SET imported_at = $failed_at, failure = $failure FROM {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
  AND {stamped("place_imports")}
RETURNING place_imports.area, place_imports.category
"""

# Only a mark that is no longer on its way goes (failed, or lost past IMPORT_HOURS): a mark on its way, a real
# release, or a mark another caller wrote a moment ago fails the WHERE and stays.
FORGET_FAILED_IMPORT = f"""
DELETE FROM place_imports
WHERE area = $area AND category = $category AND release = $requested
  AND NOT ({on_its_way("place_imports")})
RETURNING {IMPORT_COLUMNS}
"""


# The analyst's roll-out: loaded pairs active campaigns need ($campaign_id's alone, or every one), of $category or of
# any, asked to move to $release now. A pair on it already, on its way, failed, or whose rows of $release the drift
# gate holds is left as it is: its import is decided, and reading it again would say the same.
ROLL_OUT = """
UPDATE place_imports SET roll_out = $release
WHERE release <> $requested AND release <> $release AND roll_out IS DISTINCT FROM $release
  AND ($category::TEXT IS NULL OR category = $category::TEXT)
  AND EXISTS (
      SELECT 1 FROM needed_pairs AS n
      WHERE n.area = place_imports.area AND n.category = place_imports.category AND n.campaigns > 0
  )
  AND ($campaign_id::INTEGER IS NULL OR EXISTS (
      SELECT 1 FROM campaign_areas AS ca JOIN campaign_categories AS cc ON cc.campaign_id = ca.campaign_id
      WHERE ca.campaign_id = $campaign_id::INTEGER AND ca.area = place_imports.area
        AND cc.category = place_imports.category
  ))
  AND NOT EXISTS (
      SELECT 1 FROM held_imports AS h
      WHERE h.area = place_imports.area AND h.category = place_imports.category AND h.release = $release
  )
RETURNING area, category
"""

# Marks a run should exist for by now, by stamp: younger than the launch grace the run may still be being
# launched; from IMPORT_HOURS on a mark reads as failed and nobody waits on it, and a failed one at once.
AWAITING_RUN = f"""
SELECT imported_at, count(*) FROM place_imports
WHERE {on_its_way("place_imports")} AND place_imports.imported_at <= $launched_before
GROUP BY imported_at ORDER BY imported_at
"""

STAMPED = f"""
SELECT area, category FROM place_imports WHERE {stamped("place_imports")}
"""


# A pair's place_imports row deleted or marked failed, which its imported_at alone does not say. A pair nobody needs
# gets a row at 0 rather than a lookup first: sorted, like the others, so that no two writers deadlock.
TOUCH_NEEDED_PAIRS = """
INSERT INTO needed_pairs (area, category, block, campaigns, changed_at)
SELECT unnest($areas::TEXT[]) AS area, unnest($categories::TEXT[]) AS category, unnest($blocks::TEXT[]), 0,
       $changed_at
ORDER BY area, category
ON CONFLICT (area, category) DO UPDATE SET changed_at = excluded.changed_at
"""


def mark(tx: Transaction, pairs: dict[str, list[str]], stamp: datetime, now: datetime, *, force: bool) -> list[Pair]:
    """Mark the pairs (``pair_params``) as requested with ``stamp`` where the rule at ``now`` finds them missing,
    or whatever their state if ``force``; returns the pairs marked."""
    return tx.rows(MARK, **pairs, **rule(now), stamp=stamp, force=force)


def take_back(tx: Transaction, pairs: dict[str, list[str]], stamp: datetime) -> int:
    """Delete this caller's unused marks (its exact stamp); returns how many."""
    return len(_rows_changing_needs(tx, TAKE_BACK, **pairs, requested=REQUESTED, stamp=stamp))


def mark_failed(tx: Transaction, pairs: dict[str, list[str]], stamp: datetime, now: datetime, reason: str) -> int:
    """Record that the marks of ``stamp`` failed at ``now``, and why; returns how many were recorded."""
    failed = _rows_changing_needs(
        tx, MARK_FAILED, **pairs, requested=REQUESTED, stamp=stamp, failed_at=now, failure=reason
    )
    return len(failed)


def roll_out(tx: Transaction, release: str, campaign_id: int | None, category: str | None) -> int:
    """Ask the chosen loaded pairs (``ROLL_OUT``) to move to ``release`` now; returns how many were asked."""
    rows = _rows_changing_needs(
        tx, ROLL_OUT, release=release, requested=REQUESTED, campaign_id=campaign_id, category=category
    )
    return len(rows)


def forget_failed(tx: Transaction, area: str, category: str, now: datetime) -> PlaceImport | None:
    """Delete the pair's failed mark; returns it, or None if the pair had none."""
    rows = _rows_changing_needs(tx, FORGET_FAILED_IMPORT, area=area, category=category, **rule(now))
    return PlaceImport(*rows[0]) if rows else None


def awaiting_run(tx: Transaction, now: datetime) -> dict[datetime, int]:
    """The stamps of marks on their way past the launch grace at ``now``, and how many marks carry each."""
    launched_before = now - timedelta(minutes=LAUNCH_GRACE_MINUTES)
    return dict(tx.rows(AWAITING_RUN, **rule(now), launched_before=launched_before))


def stamped_pairs(tx: Transaction, stamp: datetime) -> list[Pair]:
    """The pairs whose mark carries exactly this stamp."""
    return tx.rows(STAMPED, requested=REQUESTED, stamp=stamp)


def _rows_changing_needs(tx: Transaction, statement: str, **params: Any) -> list[tuple]:
    """The rows a statement returns; if it returns any, the change is noted for the sensors."""
    rows = tx.rows(statement, **params)
    if rows:
        touched = pair_params((area, category) for area, category, *_ in rows)
        blocks = [block_key(parse_area_key(area)) for area in touched["areas"]]
        tx.run(TOUCH_NEEDED_PAIRS, **touched, blocks=blocks, changed_at=datetime.now(UTC))
        needs.note_needs_changed(tx)
    return rows
