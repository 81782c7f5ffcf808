"""Carrying pairs over to a newer release without reading it: the release's changelog listed no change in their
cells (``overture.changelog``), so their places are the new release's as they stand. The statements sit beside the
code that runs them, inside ``Store``'s transactions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nakodo_dagster.store.sql import PAIRS

if TYPE_CHECKING:
    from nakodo_dagster.store.base import Transaction

Pair = tuple[str, str]

# A changelog says what changed since the release just before its own: only a pair whose places came from that
# release can take the changelog's word for it (one that came from an older release may have missed a change in
# between, and one never read has nothing to carry). A removed place is told by its id: a pair that held one is read.
READ_FROM = f"""
SELECT place_imports.area, place_imports.category
FROM place_imports JOIN {PAIRS} AS pair
  ON place_imports.area = pair.area AND place_imports.category = pair.category
WHERE place_imports.places_release = $base
"""

CARRIABLE = f"""
{READ_FROM}
  AND NOT EXISTS (
      SELECT 1 FROM places
      WHERE places.area = place_imports.area AND places.category = place_imports.category
        AND places.id IN (SELECT unnest($removed::TEXT[]))
  )
ORDER BY place_imports.area, place_imports.category
"""

MOVE_PLACES = f"""
UPDATE places SET release = $release FROM {PAIRS} AS pair
WHERE places.area = pair.area AND places.category = pair.category
"""

# Dated now and stamped again at the commit, as a write is: the pair is fresh again, its campaigns' searches read it
# (finding nothing new, as nothing changed) and its mark on its way is replaced.
RECORD_CARRIED = f"""
UPDATE place_imports
SET release = $release, places_release = $release, imported_at = $now, failure = NULL,
    rows = (
        SELECT count(*) FROM places
        WHERE places.area = place_imports.area AND places.category = place_imports.category
    )
FROM {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
RETURNING place_imports.area, place_imports.category, place_imports.rows
"""


def read_from(tx: Transaction, pairs: dict[str, list[str]], base: str) -> list[Pair]:
    """Those of ``pairs`` whose places came from ``base``."""
    return [(area, category) for area, category in tx.rows(READ_FROM, **pairs, base=base)]


def carriable(tx: Transaction, pairs: dict[str, list[str]], base: str, removed: list[str]) -> list[Pair]:
    """Those of ``pairs`` whose places came from ``base`` and hold none of the ``removed`` ids."""
    return [(area, category) for area, category in tx.rows(CARRIABLE, **pairs, base=base, removed=removed)]


def carry(tx: Transaction, pairs: dict[str, list[str]], release: str, now: object) -> dict[Pair, int]:
    """Move the pairs' places and records to ``release``; returns each pair's count of places."""
    tx.run(MOVE_PLACES, **pairs, release=release)
    return {
        (area, category): rows for area, category, rows in tx.rows(RECORD_CARRIED, **pairs, release=release, now=now)
    }
