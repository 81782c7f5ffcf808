"""Imports landing: a run's rows replacing its pairs' places and recorded in place_imports, all at once, through
the drift gate; and what place_imports and places say about pairs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.duckdb_connection import in_memory
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import REQUESTED, ImportRun, PlaceImport, last_move_at
from nakodo_dagster.store import drift_gate, landing
from nakodo_dagster.store.models import ImportStatus, ReleasePairs, RollOut, WrittenImport
from nakodo_dagster.store.shared import IMPORT_COLUMNS, PAIRS, on_its_way, pair_state, rule
from nakodo_dagster.store.transaction import pair_params

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# The columns write_import takes from the reader's table, any others ignored. websites and phones: lists of
# strings (stored as JSON text) or JSON text already; address: one formatted line, or a struct kept as JSON.
# sources ('dataset:record_id' joined by '|') and closed (Overture marks the place permanently_closed) may be
# absent: no source records, and open.
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
    "sources",
    "closed",
)

TEXT_OR_JSON_COLUMNS = ("address", "websites", "phones")

IMPORT_ROWS = f"""
SELECT {IMPORT_COLUMNS} FROM place_imports
WHERE area IN (SELECT unnest($areas::TEXT[])) AND category IN (SELECT unnest($categories::TEXT[]))
"""

# Every pair is recorded, with zero rows if need be: "this area has no cafes" is a result.
RECORD_IMPORTS = f"""
INSERT INTO place_imports (area, category, release, places_release, rows, imported_at)
SELECT pair.area, pair.category, $release, $release, count(i.id) FILTER (WHERE NOT i.closed), $now
FROM {PAIRS} AS pair
LEFT JOIN incoming_places AS i ON i.area = pair.area AND i.category = pair.category
GROUP BY pair.area, pair.category
ORDER BY pair.area, pair.category
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, places_release = excluded.places_release, places_carried = FALSE,
    rows = excluded.rows, imported_at = excluded.imported_at, failure = NULL
RETURNING area, category, rows
"""

# Marks on their way that another import holds ($stamp is the writer's own; a run without one holds none): the
# write still lands, since a release read is the same for whoever reads it, but the run says whose it replaced.
OTHERS_ON_THEIR_WAY = f"""
SELECT place_imports.area, place_imports.category, place_imports.imported_at
FROM place_imports JOIN {PAIRS} AS pair ON place_imports.area = pair.area AND place_imports.category = pair.category
WHERE {on_its_way("place_imports")}
  AND place_imports.imported_at IS DISTINCT FROM $stamp
ORDER BY place_imports.area, place_imports.category
"""

STAMP_IMPORTS = f"""
UPDATE place_imports SET imported_at = $committed_at FROM {PAIRS} AS pair
WHERE place_imports.area = pair.area AND place_imports.category = pair.category
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

# Each release the store holds places of, or holds back at the drift gate, newest first.
RELEASE_PAIRS = """
WITH holding AS (
    SELECT places_release AS release, count(*) AS pairs, count(*) FILTER (WHERE places_carried) AS carried
    FROM place_imports WHERE places_release IS NOT NULL GROUP BY places_release
), held AS (
    SELECT release, count(*) AS held FROM held_imports GROUP BY release
)
SELECT coalesce(holding.release, held.release) AS release, coalesce(holding.pairs, 0), coalesce(holding.carried, 0),
       coalesce(held.held, 0)
FROM holding FULL JOIN held ON holding.release = held.release
ORDER BY release DESC
"""


# How far $release has reached among the pairs that hold places: on it, in all, asked to move to it now, and the
# newest load of an older release (marks aside: one on its way moves within hours), which sets the pace's end.
ROLL_OUT_STATUS = """
SELECT count(*) FILTER (WHERE places_release = $release),
       count(*),
       count(*) FILTER (WHERE roll_out = $release AND release <> $release AND release <> $requested),
       max(imported_at) FILTER (WHERE places_release <> $release AND release <> $requested)
FROM place_imports WHERE places_release IS NOT NULL
"""


def incoming(places: pa.Table) -> pa.Table:
    """The rows to write, with exactly ``INCOMING_COLUMNS``; list or struct columns become JSON text, absent optional
    columns are filled (no sources, open)."""
    places = _with_sources_and_closed(places)
    absent = [name for name in INCOMING_COLUMNS if name not in places.column_names]
    if absent:
        raise InvalidInput(f"places table lacks columns {absent}; needed: {list(INCOMING_COLUMNS)}")
    rows = places.select(list(INCOMING_COLUMNS))
    text = (pa.types.is_string, pa.types.is_large_string)
    to_json = [n for n in TEXT_OR_JSON_COLUMNS if not any(is_text(rows.schema.field(n).type) for is_text in text)]
    if not to_json:
        return rows
    # Column names come from INCOMING_COLUMNS, never from the caller.
    select = ", ".join(f"to_json({name})::VARCHAR AS {name}" if name in to_json else name for name in INCOMING_COLUMNS)
    with in_memory() as memory:
        memory.register("incoming", rows)
        return memory.execute(f"SELECT {select} FROM incoming").to_arrow_table()


def _with_sources_and_closed(places: pa.Table) -> pa.Table:
    """``places`` with a sources column (none where absent) and a closed one that is never null (open where absent)."""
    if "sources" not in places.column_names:
        places = places.append_column("sources", pa.nulls(places.num_rows, pa.string()))
    closed = (
        places["closed"].cast(pa.bool_()) if "closed" in places.column_names else pa.nulls(places.num_rows, pa.bool_())
    )
    closed = pc.fill_null(closed, False)
    if "closed" in places.column_names:
        return places.set_column(places.schema.get_field_index("closed"), "closed", closed)
    return places.append_column("closed", closed)


def write(
    tx: Transaction,
    run: ImportRun,
    params: dict[str, list[str]],
    release: str,
    places: pa.Table,
    now: datetime | None,
    stamp: datetime | None,
    gate: DriftLimits | None,
    accept: bool,
) -> WrittenImport:
    """Replace the places of the run's pairs (``params``) with ``places`` (``incoming``) and record the release
    (``Store.write_import``)."""
    written_at = now or datetime.now(UTC)
    others = tx.rows(OTHERS_ON_THEIR_WAY, **params, **rule(written_at), stamp=stamp)
    tx.run(landing.CREATE_INCOMING)
    tx.load_incoming_places(places)
    # Recorded first: the upsert locks the pairs' rows, so a second writer of the same pairs (an analyst's
    # re-materialisation) waits for this one and then replaces its places rather than colliding with them.
    recorded = tx.rows(RECORD_IMPORTS, **params, release=release, now=written_at)
    compared = drift_gate.measure(tx, params, release) if gate is not None else {}
    holding = drift_gate.hold(tx, compared, gate, written_at) if gate is not None and not accept else {}
    landing_pairs = pair_params(pair for pair in run.pairs if pair not in holding) if holding else params
    if landing_pairs["areas"]:
        landing.land(tx, landing_pairs, release, written_at)
    if now is None:
        tx.run(STAMP_IMPORTS, **params, committed_at=datetime.now(UTC))
    return WrittenImport(
        {
            (area, category): holding[(area, category)].drift.before if (area, category) in holding else rows
            for area, category, rows in recorded
        },
        {(area, category): other for area, category, other in others},
        compared,
        holding,
    )


def import_rows(tx: Transaction, areas: list[str], categories: list[str]) -> list[PlaceImport]:
    """What place_imports says about every pair of these areas and categories."""
    return [PlaceImport(*row) for row in tx.rows(IMPORT_ROWS, areas=areas, categories=categories)]


def import_status(tx: Transaction, now: datetime) -> list[ImportStatus]:
    """Per category, how many pairs are in each state at ``now``, and the oldest release."""
    return [ImportStatus(*row) for row in tx.rows(IMPORT_STATUS, **rule(now))]


def roll_out_status(tx: Transaction, release: str, now: datetime) -> RollOut:
    """How far ``release`` has reached (``Store.roll_out_status``)."""
    [(on_release, pairs, asked, newest_older_load)] = tx.rows(ROLL_OUT_STATUS, release=release, requested=REQUESTED)
    return RollOut(release, on_release, pairs, asked, last_move_at(newest_older_load, now))


def release_pairs(tx: Transaction) -> list[ReleasePairs]:
    """Each release's pairs and held pairs, newest first."""
    return [ReleasePairs(*row) for row in tx.rows(RELEASE_PAIRS)]
