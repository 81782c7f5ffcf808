"""Carrying pairs over to a newer release without reading it: the release's changelog listed no change in their
cells (``overture.changelog``), so their places are the new release's as they stand. The statements sit beside the
code that runs them, inside ``Store``'s transactions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nakodo_dagster.store import landing
from nakodo_dagster.store.imports import OTHERS_ON_THEIR_WAY, STAMP_IMPORTS
from nakodo_dagster.store.models import WrittenImport
from nakodo_dagster.store.shared import PAIRS, rule
from nakodo_dagster.store.transaction import pair_params

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

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

# Dated now and stamped again at the commit, as a write is: the pair is fresh again, its campaigns' searches read it
# (finding nothing new, as nothing changed) and its mark on its way is replaced.
RECORD_CARRIED = f"""
UPDATE place_imports
SET release = $release, places_release = $release, places_carried = TRUE, imported_at = $now, failure = NULL,
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


def carry_over(
    tx: Transaction,
    pairs: dict[str, list[str]],
    release: str,
    base: str,
    removed: list[str],
    now: datetime | None,
    stamp: datetime | None,
) -> WrittenImport:
    """Move to ``release`` those of ``pairs`` whose places came from ``base`` and hold none of the ``removed`` ids
    (``Store.carry_over``): their places and records, dated ``now`` or at the commit; the rest stays as it is."""
    carried = [(area, category) for area, category in tx.rows(CARRIABLE, **pairs, base=base, removed=removed)]
    if not carried:
        return WrittenImport({}, {})
    pairs_carried = pair_params(carried)
    written_at = now or datetime.now(UTC)
    others = tx.rows(OTHERS_ON_THEIR_WAY, **pairs_carried, **rule(written_at), stamp=stamp)
    # Landed as any rows are, though their places stay as they were: whatever lands rows records what changed.
    tx.run(landing.CREATE_INCOMING)
    tx.run(landing.INCOMING_FROM_PLACES, **pairs_carried)
    landing.land(tx, pairs_carried, release, written_at)
    rows = tx.rows(RECORD_CARRIED, **pairs_carried, release=release, now=written_at)
    if now is None:
        tx.run(STAMP_IMPORTS, **pairs_carried, committed_at=datetime.now(UTC))
    return WrittenImport(
        {(area, category): count for area, category, count in rows},
        {(area, category): other for area, category, other in others},
    )
