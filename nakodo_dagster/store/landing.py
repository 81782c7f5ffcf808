"""The one way a pair's rows land in places, whatever brings them: an import run's read (the sensor's or an
analyst's), an analyst's acceptance of rows the drift gate held, or a changelog's carry-over. The rows wait in the
temp table incoming_places; ``land`` records what they change about the pairs' place ids (``changes.record``), then
replaces the pairs' places with them and leaves nothing held for the pairs. A path that lands rows any other way
would leave campaigns listing a reissued business twice, or a closed one as open."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from nakodo_dagster.store import changes
from nakodo_dagster.store.shared import INCOMING_AS_PLACES, PAIRS, PLACE_COLUMNS

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# The rows to land: a place Overture marks permanently_closed comes too (closed), so that what it was is known; only
# the rest become places.
CREATE_INCOMING = """
CREATE TEMP TABLE incoming_places (
    id TEXT, area TEXT, category TEXT, name TEXT, lat DOUBLE PRECISION, lng DOUBLE PRECISION,
    confidence DOUBLE PRECISION, address TEXT, country TEXT, websites TEXT, phones TEXT, sources TEXT, closed BOOLEAN
)
"""

# A pair's places as rows to land again: a carry-over moves them to a newer release unchanged.
INCOMING_FROM_PLACES = f"""
INSERT INTO incoming_places (id, area, category, name, lat, lng, confidence, address, country, websites, phones,
                             sources, closed)
SELECT p.id, p.area, p.category, p.name, p.lat, p.lng, p.confidence, p.address, p.country, p.websites, p.phones,
       p.sources, FALSE
FROM places AS p JOIN {PAIRS} AS pair ON p.area = pair.area AND p.category = pair.category
"""

# A pair's held rows as rows to land: an analyst accepted them.
INCOMING_FROM_HELD = """
INSERT INTO incoming_places (id, area, category, name, lat, lng, confidence, address, country, websites, phones,
                             sources, closed)
SELECT id, area, category, name, lat, lng, confidence, address, country, websites, phones, sources, closed
FROM held_places WHERE area = $area AND category = $category
"""

DELETE_PLACES = f"""
DELETE FROM places USING {PAIRS} AS pair
WHERE places.area = pair.area AND places.category = pair.category
"""

# The join on the pairs is what keeps a run from writing a pair somebody else reserved.
INSERT_PLACES = f"""
INSERT INTO places ({PLACE_COLUMNS})
SELECT {INCOMING_AS_PLACES}
FROM incoming_places AS i JOIN {PAIRS} AS pair ON pair.area = i.area AND pair.category = i.category
WHERE NOT i.closed
"""

FORGET_HELD = (
    f"""
    DELETE FROM held_places USING {PAIRS} AS pair
    WHERE held_places.area = pair.area AND held_places.category = pair.category
    """,
    f"""
    DELETE FROM held_imports USING {PAIRS} AS pair
    WHERE held_imports.area = pair.area AND held_imports.category = pair.category
    """,
)


def land(tx: Transaction, pairs: dict[str, list[str]], release: str, now: datetime) -> None:
    """Replace the ``pairs``' places with their rows in incoming_places, as places of ``release``, recording at
    ``now`` what that changes about their ids; nothing stays held for them."""
    for statement in FORGET_HELD:
        tx.run(statement, **pairs)
    changes.record(tx, pairs, release, now)
    tx.run(DELETE_PLACES, **pairs)
    tx.run(INSERT_PLACES, **pairs, release=release)
