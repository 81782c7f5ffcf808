"""The drift gate in the store: measuring a newer release's rows against a pair's places, holding them, listing
and accepting what was held. The statements sit beside the code that runs them, inside ``Store``'s transactions;
the decision itself is ``drift.drift_reasons``, plain Python."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nakodo_dagster.drift import DriftLimits, PairDrift, drift_reasons, gated
from nakodo_dagster.store import landing
from nakodo_dagster.store.models import HeldImport
from nakodo_dagster.store.shared import INCOMING_AS_PLACES, PAIRS, PLACE_COLUMNS
from nakodo_dagster.store.transaction import pair_params

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

Pair = tuple[str, str]

# A confidence that is not a number (NaN, which both databases sort above every number) counts as none.
_CONFIDENCE = "CASE WHEN {table}.confidence <= 1 THEN {table}.confidence END"


def _median(table: str) -> str:
    return f"percentile_cont(0.5) WITHIN GROUP (ORDER BY {_CONFIDENCE.format(table=table)})"


# Each of the run's pairs that holds places: the release they came from (one per pair, written together), how many
# there are and their median confidence, against the incoming rows' count, median, and how many ids both hold.
# Reads the pairs' places before the write replaces them, in the write's transaction. A row of a place Overture marks
# permanently_closed is no business of the release's: it is not counted.
MEASURE = f"""
WITH held AS (
    SELECT places.area, places.category, max(places.release) AS release, count(*) AS places,
           {_median("places")} AS confidence
    FROM places JOIN {PAIRS} AS pair ON places.area = pair.area AND places.category = pair.category
    GROUP BY places.area, places.category
), incoming AS (
    SELECT i.area, i.category, count(*) AS places, {_median("i")} AS confidence
    FROM incoming_places AS i JOIN {PAIRS} AS pair ON i.area = pair.area AND i.category = pair.category
    WHERE NOT i.closed
    GROUP BY i.area, i.category
), kept AS (
    SELECT places.area, places.category, count(*) AS places
    FROM places
    JOIN {PAIRS} AS pair ON places.area = pair.area AND places.category = pair.category
    JOIN incoming_places AS i ON i.area = places.area AND i.category = places.category AND i.id = places.id
    WHERE NOT i.closed
    GROUP BY places.area, places.category
)
SELECT held.area, held.category, held.release, held.places, coalesce(incoming.places, 0), coalesce(kept.places, 0),
       held.confidence, incoming.confidence
FROM held
LEFT JOIN incoming ON incoming.area = held.area AND incoming.category = held.category
LEFT JOIN kept ON kept.area = held.area AND kept.category = held.category
"""

_HELD_COLUMNS = (
    "area, category, release, kept_release, places_before, places_after, places_kept, confidence_before, "
    "confidence_after, reasons, held_at"
)

HOLD = f"""
INSERT INTO held_imports ({_HELD_COLUMNS})
VALUES ($area, $category, $release, $kept_release, $before, $after, $kept, $confidence_before, $confidence_after,
        $reasons, $held_at)
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, kept_release = excluded.kept_release, places_before = excluded.places_before,
    places_after = excluded.places_after, places_kept = excluded.places_kept,
    confidence_before = excluded.confidence_before, confidence_after = excluded.confidence_after,
    reasons = excluded.reasons, held_at = excluded.held_at
"""

FORGET_HELD_PLACES_OF = "DELETE FROM held_places WHERE area = $area AND category = $category"
# The closed rows too: an acceptance lands them as the write would have (landing.land).
KEEP_HELD_PLACES = f"""
INSERT INTO held_places ({PLACE_COLUMNS}, closed)
SELECT {INCOMING_AS_PLACES}, i.closed
FROM incoming_places AS i WHERE i.area = $area AND i.category = $category
"""

# The pair keeps what it held: its release and count, dated now (the write stamps it at its commit), so that it
# reads as fresh and is tried again with the release after next, FRESH_DAYS on. A hold is not a failure.
KEEP_RELEASE = """
UPDATE place_imports SET release = $kept_release, places_release = $kept_release, rows = $before
WHERE area = $area AND category = $category
"""

HELD = f"SELECT {_HELD_COLUMNS} FROM held_imports ORDER BY held_at, area, category"

# Taking the held row first locks the pair's hold: two analysts accepting at once accept it once.
TAKE_HELD = f"DELETE FROM held_imports WHERE area = $area AND category = $category RETURNING {_HELD_COLUMNS}"
# Dated when the accepted places become visible, as every loaded pair is: searches read them as landed.
RECORD_ACCEPTED = """
INSERT INTO place_imports (area, category, release, places_release, rows, imported_at)
VALUES ($area, $category, $release, $release, $rows, $now)
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, places_release = excluded.places_release, places_carried = FALSE,
    rows = excluded.rows, imported_at = excluded.imported_at, failure = NULL
"""


def held_import(row: tuple) -> HeldImport:
    """A held_imports row as a HeldImport."""
    area, category, release, kept_release, before, after, kept, confidence_before, confidence_after, reasons, at = row
    drift = PairDrift(kept_release, release, before, after, kept, confidence_before, confidence_after)
    return HeldImport(area, category, drift, reasons, at)


def measure(tx: Transaction, pairs: dict[str, list[str]], release: str) -> dict[Pair, PairDrift]:
    """The run's pairs that hold places from a release older than ``release``, each measured against the incoming
    rows (``incoming_places``, loaded)."""
    compared = {}
    for area, category, held, before, after, kept, confidence_before, confidence_after in tx.rows(MEASURE, **pairs):
        if gated(release, held):
            compared[(area, category)] = PairDrift(
                held, release, before, after, kept, confidence_before, confidence_after
            )
    return compared


def hold(
    tx: Transaction, compared: dict[Pair, PairDrift], limits: DriftLimits, held_at: datetime
) -> dict[Pair, HeldImport]:
    """Hold the compared pairs past ``limits``: their incoming rows kept aside, their numbers recorded, and their
    place_imports row back on the release they keep. Returns the pairs held."""
    held = {}
    for (area, category), drift in compared.items():
        reasons = drift_reasons(drift, limits)
        if not reasons:
            continue
        held[(area, category)] = HeldImport(area, category, drift, "; ".join(reasons), held_at)
        pair = {"area": area, "category": category}
        tx.run(
            HOLD,
            **pair,
            release=drift.release,
            kept_release=drift.kept_release,
            before=drift.before,
            after=drift.after,
            kept=drift.kept,
            confidence_before=drift.confidence_before,
            confidence_after=drift.confidence_after,
            reasons=held[(area, category)].reasons,
            held_at=held_at,
        )
        tx.run(FORGET_HELD_PLACES_OF, **pair)
        tx.run(KEEP_HELD_PLACES, **pair, release=drift.release)
        tx.run(KEEP_RELEASE, **pair, kept_release=drift.kept_release, before=drift.before)
    return held


def accept(tx: Transaction, area: str, category: str) -> HeldImport | None:
    """Land the pair's held rows in place of its places (``landing.land``: what they change recorded as an import's
    are), as an import dated as it commits; None if none are held."""
    rows = tx.rows(TAKE_HELD, area=area, category=category)
    if not rows:
        return None
    accepted = held_import(rows[0])
    now = datetime.now(UTC)
    tx.run(landing.CREATE_INCOMING)
    tx.run(landing.INCOMING_FROM_HELD, area=area, category=category)
    landing.land(tx, pair_params([(area, category)]), accepted.drift.release, now)
    tx.run(
        RECORD_ACCEPTED,
        area=area,
        category=category,
        release=accepted.drift.release,
        rows=accepted.drift.after,
        now=now,
    )
    return accepted
